"""Every tool on valid and invalid input: in process and through the MCP server (in-memory)."""

from __future__ import annotations

import anyio
from mcp import Client

from worldfactory.runtime.mcp_server import build_server
from worldfactory.runtime.world import World
from worldfactory.sandbox import run_probes


def test_probes_catch_a_tool_that_lost_its_rule_or_state_check(world: World) -> None:
    """Planted in tools.py: one tool without a probed business-rule guard, another without its state
    check. The probe run (the tools stage's proof) must name both; the generated code as built passes."""
    source = world.files["tools.py"].decode()
    lines = source.splitlines(keepends=True)
    expects = {t["name"]: [b["expect"] for b in t["examples"]["invalid"]] for t in world.tool_manifest}

    def tool_of(i: int) -> str:
        return next(line.split("def ", 1)[1].split("(", 1)[0] for line in reversed(lines[:i])
                    if line.startswith("def "))

    planted: dict[int, str] = {}
    for marker in ("db.guard(", "db.require_state("):
        i = next(i for i, line in enumerate(lines) if marker in line and i not in planted
                 and (marker != "db.guard(" or any(e in line for e in expects[tool_of(i)])))
        planted[i] = tool_of(i)
    broken = "".join(line for i, line in enumerate(lines) if i not in planted)
    report = run_probes(World({**world.files, "tools.py": broken.encode()}))
    named = {f.split(":", 1)[0] for f in report["failures"]}
    assert set(planted.values()) <= named, report["failures"][:5]
    with_valid = sum(1 for t in world.tool_manifest if t["examples"]["valid"] is not None)
    assert with_valid >= 0.9 * len(world.tool_manifest)
    assert run_probes(world)["failures"] == []


def test_invalid_calls_over_mcp_are_errors_and_change_nothing(world: World) -> None:
    """After each refused call the change log names no change (state_key, as the fuzzer checks); after
    them all every table, change log included, is as it was (snapshot, which reads the whole database:
    once before and once after, not around each of the hundreds of calls)."""
    episode = world.episode()
    server = build_server(world, episode)
    checked = 0
    start, unchanged = episode.snapshot(), episode.state_key()

    async def go() -> None:
        nonlocal checked
        async with Client(server) as client:
            for entry in world.tool_manifest:
                for bad in entry["examples"]["invalid"]:
                    res = await client.call_tool(entry["name"], bad["args"])
                    text = " ".join(getattr(b, "text", "") for b in res.content)
                    assert res.is_error, (entry["name"], bad)
                    assert bad["expect"] in text, text
                    assert episode.state_key() == unchanged, (entry["name"], bad)
                    checked += 1

    anyio.run(go)
    assert checked >= 3 * len(world.tool_manifest)
    assert episode.snapshot() == start


def test_unknown_tool_and_non_object_arguments(world: World) -> None:
    with world.episode() as ep:
        before = ep.snapshot()
        res = ep.call("drop_all_tables", {})
        assert not res.ok and "unknown tool 'drop_all_tables'" in (res.error or "")
        res = ep.call(world.tool_manifest[0]["name"], ["not", "an", "object"])  # type: ignore[arg-type]
        assert not res.ok and "expected a JSON object" in (res.error or "")
        assert ep.snapshot() == before


def test_read_only_tools_change_nothing(world: World) -> None:
    for entry in world.tool_manifest:
        if entry["annotations"]["read_only_hint"] and entry["examples"]["valid"] is not None:
            with world.episode() as ep:
                before = ep.snapshot()
                assert ep.call(entry["name"], entry["examples"]["valid"]).ok
                assert ep.snapshot() == before, entry["name"]


def test_write_tools_record_an_audit_entry(world: World) -> None:
    entry = next(t for t in world.tool_manifest if t["kind"] == "transition" and t["examples"]["valid"])
    with world.episode() as ep:
        assert ep.call(entry["name"], entry["examples"]["valid"]).ok
        diff = ep.diff()
    assert any(r["action"] == entry["name"] for r in diff["audit_log"]["inserted"])


def test_tool_source_is_typed_and_documented(world: World) -> None:
    import inspect

    for name, fn in world.functions.items():
        sig = inspect.signature(fn, eval_str=True)
        assert fn.__doc__ and len(fn.__doc__) > 20, name
        for p in list(sig.parameters.values())[1:]:
            assert p.annotation is not inspect.Parameter.empty, (name, p.name)
        assert fn.__wf_tool__["provenance"] == "local-twin"

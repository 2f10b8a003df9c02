"""MCP round trips with the official client: in-memory, stdio and streamable HTTP, against tools.json.

For every tool of a world, `tools/list` on each surface must carry exactly what tools.json declares
(description, input schema with every parameter's description and bounds, annotations, provenance),
and the same calls (each tool's valid example, its invalid examples and a repeated transition that
must be refused) must give the same error flag, text and structured result as in process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import PYTHON
from worldfactory.runtime.mcp_server import build_server, tool_text
from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"
Outcome = tuple[bool, str, Any]  # (is_error, text, structured content)


def _calls(world: World) -> list[tuple[str, Any]]:
    """Every tool's valid example, then its invalid ones, then a repeated transition (wrong state now)."""
    calls: list[tuple[str, Any]] = []
    for entry in world.tool_manifest:
        if entry["examples"]["valid"] is not None:
            calls.append((entry["name"], entry["examples"]["valid"]))
        calls.extend((entry["name"], bad["args"]) for bad in entry["examples"]["invalid"])
    write = next(t for t in world.tool_manifest if t["kind"] == "transition" and t["examples"]["valid"])
    calls += [(write["name"], write["examples"]["valid"])] * 2
    calls.append(("no_such_tool", {}))
    return calls


def _in_process(world: World) -> list[Outcome]:
    with world.episode() as ep:
        out = []
        for name, args in _calls(world):
            step = ep.call(name, args)
            out.append((not step.ok, tool_text(step), step.result if step.ok else None))
        return out


def _listed(tool: Any) -> dict[str, Any]:
    wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    ann = wire.get("annotations", {})
    return {"name": wire["name"], "description": wire.get("description"), "input_schema": wire["inputSchema"],
            "provenance": wire.get("_meta", {}).get("provenance"), "output_schema": wire.get("outputSchema"),
            "annotations": {"read_only_hint": ann.get("readOnlyHint"), "destructive_hint": ann.get("destructiveHint"),
                            "idempotent_hint": ann.get("idempotentHint")}}


def _declared(entry: dict[str, Any]) -> dict[str, Any]:
    return {"name": entry["name"], "description": entry["description"], "input_schema": entry["input_schema"],
            "provenance": entry["provenance"], "output_schema": None, "annotations": entry["annotations"]}


async def _over(client_target: Any, world: World) -> tuple[list[dict[str, Any]], list[Outcome], str | None]:
    async with Client(client_target) as client:
        tools = [_listed(t) for t in (await client.list_tools()).tools]
        out: list[Outcome] = []
        for name, args in _calls(world):
            r = await client.call_tool(name, args)
            assert len(r.content) == 1
            out.append((r.is_error, r.content[0].text, None if r.is_error else r.structured_content))  # type: ignore[union-attr]
        return tools, out, client.instructions


def _check(world: World, got: tuple[list[dict[str, Any]], list[Outcome], str | None]) -> None:
    tools, outcomes, said = got
    assert said is not None and f"Today is {world.clock}" in said
    assert [t["name"] for t in tools] == [t["name"] for t in world.tool_manifest]
    for listed, entry in zip(tools, world.tool_manifest, strict=True):
        assert listed == _declared(entry), entry["name"]
    assert not {"verify", "reset"} & {t["name"] for t in tools}
    want = _in_process(world)
    assert len(outcomes) == len(want)
    for call, a, b in zip(_calls(world), outcomes, want, strict=True):
        assert a == b, call
    assert sum(1 for o in want if o[0]) > len(world.tool_manifest)  # errors were sampled, not only results
    assert not any(o[1].startswith("Error executing tool") for o in outcomes)


def test_in_memory(worlds: dict[str, World]) -> None:
    world = worlds[WORLD]
    _check(world, anyio.run(_over, build_server(world), world))


def test_stdio(worlds_dir: Path, worlds: dict[str, World]) -> None:
    world = worlds[WORLD]
    params = StdioServerParameters(command=PYTHON, args=["-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD)],
                                   env={"PATH": os.environ.get("PATH", "")})
    _check(world, anyio.run(_over, params, world))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_url(worlds_dir: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD), "--transport", "http",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_streamable_http(http_url: str, worlds: dict[str, World]) -> None:
    world = worlds[WORLD]
    _check(world, anyio.run(_over, http_url, world))

"""A blind agent's console: a world served over MCP, solutions replayed through a real MCP client and graded.

Written for measuring fairness the way an agent meets a world (issue 30, criterion 5). The world is
served by `worldfactory serve WORLD --transport http` (the project's own server, confined as in
production) on a free loopback port. Everything the author of a solution may see comes from that
server: `tools` prints `tools/list` as an MCP client receives it, `tasks` prints the sampled tasks'
instructions as the control plane hands them out, `call` runs calls in a free-form MCP session (to
look records up). Nothing here reads a task's oracle, gold diff or verifier.

`run` replays a solution file (`bench/blind/<world>.jsonl`) and grades it through the control
plane: for each line it opens an episode for the task (`POST /control/episodes`), makes the calls
over streamable HTTP at the episode's `mcp_url` with the SDK's client, and posts the answer to
`/control/episodes/<id>/verify`. A solution line:

    {"task_id": "...", "instruction": "as served when the solution was written", "calls": [CALL, ...],
     "answer": ANSWER, "guesses": ["what the tools never said"],
     "author_error": "set only when the solution was wrong (not the grader's fault)"}

A line whose instruction is no longer the served one (the world was rebuilt and the task changed), or
whose task the world no longer has, is reported STALE and not graded.

    CALL = {"tool": "search_claims", "args": {...}, "as": "found"}           # result kept as $found
         | {"each": "$found.claims", "where": {"status": "open"},             # one call per item ($item)
            "tool": "close_claim", "args": {"claim_id": "$item.claim_id"}}     # or "do": [CALL, ...]

A string "$name.path" is replaced by that value of an earlier result; a path step is a key, a
list index, `[key=value]` (the first item whose key equals value, case-insensitively), or a final
`|len`, `|sum:key`, `|map:key`. "${name.path}" inside a longer string is interpolated. A solution
whose call fails keeps going (an agent would read the error); the verdict is the control plane's.

    .venv/bin/python bench/blind_console.py tools  data/worlds/W [--names]
    .venv/bin/python bench/blind_console.py tasks  data/worlds/W
    .venv/bin/python bench/blind_console.py call   data/worlds/W '{"tool": "search_claims", "args": {}}' [...]
    .venv/bin/python bench/blind_console.py run    data/worlds/W [bench/blind/W.jsonl] [--json]

`run` prints one line per task and a summary: passed, failed, and unfair (failed although the
solution is valid: every failure not marked `author_error`); `--all DIR` runs every world of
bench/blind/ found under DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
from mcp import Client

ROOT = Path(__file__).resolve().parent.parent
BLIND = ROOT / "bench" / "blind"
PER_FAMILY = 2  # the sample: the first two tasks of each family by task id, plus the longest-named bulk task


class Served:
    """`worldfactory serve WORLD --transport http` on a free loopback port, with a token of our own."""

    def __init__(self, world: Path) -> None:
        self.world = world
        self.token = secrets.token_urlsafe(16)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.auth = {"Authorization": f"Bearer {self.token}"}
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Served:
        exe = Path(sys.executable).with_name("worldfactory")
        env = {**os.environ, "WORLDFACTORY_CONTROL_TOKEN": self.token}
        self.proc = subprocess.Popen([str(exe), "serve", str(self.world), "--transport", "http", "--port",
                                      str(self.port)], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise SystemExit(f"error: {self.world}: the server did not start: {err[-2000:]}")
            time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def control(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, f"{self.url}/control{path}", json=body, headers=self.auth, timeout=60)
        if r.status_code >= 400:
            raise SystemExit(f"error: control plane {method} {path}: {r.status_code} {r.text}")
        return r.json() if r.content else None


# --- references into earlier results -------------------------------------------------------------

_WHOLE = re.compile(r"^\$([A-Za-z_]\w*)((?:\.[^.|]+)*)((?:\|[\w:]+)?)$")
_INNER = re.compile(r"\$\{([^}]+)\}")


def _step(value: Any, key: str) -> Any:
    sel = re.fullmatch(r"\[(\w+)=(.*)\]", key)
    if sel:
        k, want = sel.groups()
        for item in value or []:
            if isinstance(item, dict) and str(item.get(k, "")).casefold() == want.casefold():
                return item
        raise LookupError(f"no item with {k}={want}")
    if isinstance(value, list):
        return value[int(key)]
    if isinstance(value, dict):
        if key not in value:
            raise LookupError(f"no key {key!r} (keys: {sorted(value)[:12]})")
        return value[key]
    raise LookupError(f"cannot take {key!r} of {type(value).__name__}")


def resolve(ref: str, names: dict[str, Any]) -> Any:
    m = _WHOLE.match(ref)
    if not m:
        raise LookupError(f"not a reference: {ref}")
    name, path, pipe = m.groups()
    if name not in names:
        raise LookupError(f"${name} was not kept by an earlier call")
    value = names[name]
    for key in [k for k in path.split(".") if k]:
        value = _step(value, key)
    if pipe:
        op, _, arg = pipe[1:].partition(":")
        if op == "len":
            value = len(value)
        elif op == "sum":
            value = round(sum(float(v[arg] or 0) for v in value), 2)
        elif op == "map":
            value = [v[arg] for v in value]
        else:
            raise LookupError(f"unknown |{op}")
    return value


def fill(value: Any, names: dict[str, Any]) -> Any:
    """A value with its references replaced by what earlier calls returned."""
    if isinstance(value, str):
        if _WHOLE.match(value):
            return resolve(value, names)
        return _INNER.sub(lambda m: str(resolve("$" + m.group(1), names)), value)
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    return value


def _matches(item: Any, where: dict[str, Any]) -> bool:
    return all(str(item.get(k, "")).casefold() == str(v).casefold() for k, v in where.items())


# --- an agent's session ---------------------------------------------------------------------------

async def play(url: str, calls: list[dict[str, Any]], echo: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Make the calls over MCP; the kept results and the errors met (tool errors and bad references)."""
    names: dict[str, Any] = {}
    errors: list[str] = []
    async with Client(url) as client:
        for n, call in enumerate(calls):
            if "each" not in call:
                await _one(client, call, names, errors, f"call {n}", echo)
                continue
            try:
                items = [i for i in fill(call["each"], names) if _matches(i, call.get("where", {}))]
            except (LookupError, ValueError, IndexError, TypeError) as exc:
                errors.append(f"call {n}: {exc}")
                continue
            for item in items:
                scope = {**names, "item": item}
                for sub in call.get("do", [call]):
                    await _one(client, sub, scope, errors, f"call {n}", echo)
    return names, errors


async def _one(client: Client, call: dict[str, Any], names: dict[str, Any], errors: list[str], where: str,
               echo: bool) -> None:
    """One tool call; its structured result kept under call["as"] when it succeeds."""
    try:
        args = fill(call.get("args", {}), names)
    except (LookupError, ValueError, IndexError, TypeError) as exc:
        errors.append(f"{where}: {exc}")
        return
    got = await client.call_tool(call["tool"], args)
    text = got.content[0].text if got.content else ""
    if echo:
        print(f"> {call['tool']} {json.dumps(args)}\n{text}\n")
    if got.is_error:
        errors.append(f"{where} {call['tool']}: {text[:300]}")
    elif "as" in call:
        names[call["as"]] = got.structured_content


def run_world(world: Path, solutions: Path, verbose: bool) -> dict[str, Any]:
    lines = [json.loads(x) for x in solutions.read_text().splitlines() if x.strip()]
    rows = []
    with Served(world) as srv:
        listed = {t["task_id"] for t in srv.control("GET", "/tasks")}
        for sol in lines:
            if sol["task_id"] not in listed:  # the rebuilt world has no such task: as stale, not an abort
                rows.append({"task_id": sol["task_id"], "stale": True, "now": None})
                print(f"  STALE          {sol['task_id']}: the world no longer has this task")
                continue
            ep = srv.control("POST", "/episodes", {"task_id": sol["task_id"]})
            if sol.get("instruction") not in (None, ep["instruction"]):  # written for another task: not graded
                srv.control("DELETE", f"/episodes/{ep['episode_id']}")
                rows.append({"task_id": sol["task_id"], "stale": True, "now": ep["instruction"]})
                print(f"  STALE          {sol['task_id']}: the instruction is now {ep['instruction']!r}")
                continue
            names, errors = anyio.run(play, srv.url + ep["mcp_url"], sol["calls"])
            try:
                answer = fill(sol.get("answer"), names)
            except LookupError as exc:
                errors.append(f"answer: {exc}")
                answer = None
            verdict = srv.control("POST", f"/episodes/{ep['episode_id']}/verify", {"answer": answer})
            srv.control("DELETE", f"/episodes/{ep['episode_id']}")
            row = {"task_id": sol["task_id"], "passed": verdict["passed"], "author_error": sol.get("author_error"),
                   "guesses": len(sol.get("guesses", [])), "errors": errors,
                   "mismatches": verdict["mismatches"][:3]}
            rows.append(row)
            if verbose or not row["passed"]:
                mark = "PASS" if row["passed"] else ("fail (author)" if row["author_error"] else "FAIL (unfair)")
                print(f"  {mark:<14} {sol['task_id']}  answer={json.dumps(answer)[:80]}")
                for e in errors[:3]:
                    print(f"      error: {e[:200]}")
                if not row["passed"]:
                    for m in verdict["mismatches"][:3]:
                        print(f"      mismatch: {json.dumps(m)[:300]}")
    stale = [r for r in rows if r.get("stale")]
    rows = [r for r in rows if not r.get("stale")]
    failed = [r for r in rows if not r["passed"]]
    return {"world": world.name, "tasks": len(rows), "stale": len(stale), "passed": len(rows) - len(failed),
            "failed": len(failed),
            "unfair": sum(1 for r in failed if not r["author_error"]),
            "guesses": sum(r["guesses"] for r in rows), "rows": rows}


# --- commands -------------------------------------------------------------------------------------

def _tools(world: Path, names_only: bool) -> None:
    async def listed(url: str) -> list[Any]:
        async with Client(url) as client:
            return (await client.list_tools()).tools

    with Served(world) as srv:
        tools = anyio.run(listed, srv.url + "/mcp")
    for t in tools:
        if names_only:
            print(t.name)
            continue
        ro = " (read-only)" if t.annotations and t.annotations.read_only_hint else ""
        print(f"## {t.name}{ro}: {t.description}")
        schema = t.input_schema
        for p, s in schema.get("properties", {}).items():
            req = "*" if p in schema.get("required", []) else ""
            extra = {k: v for k, v in s.items() if k not in ("description", "title")}
            print(f"   {p}{req} {json.dumps(extra)}: {s.get('description', '')}")


def sample(tasks: list[dict[str, Any]]) -> list[str]:
    """Two tasks of each family (first by id) and the last bulk task: chosen without reading a plan."""
    seen: Counter[str] = Counter()
    out = []
    for t in sorted(tasks, key=lambda t: t["task_id"]):
        if seen[t["family"]] < PER_FAMILY:
            seen[t["family"]] += 1
            out.append(t["task_id"])
    bulk = [t["task_id"] for t in sorted(tasks, key=lambda t: t["task_id"]) if t["family"] == "bulk"]
    if bulk and bulk[-1] not in out:
        out.append(bulk[-1])
    return out


def _tasks(world: Path) -> None:
    with Served(world) as srv:
        listed = srv.control("GET", "/tasks")
        for task_id in sample(listed):
            ep = srv.control("POST", "/episodes", {"task_id": task_id})
            family = next(t["family"] for t in listed if t["task_id"] == task_id)
            print(json.dumps({"task_id": task_id, "family": family, "instruction": ep["instruction"]}))
            srv.control("DELETE", f"/episodes/{ep['episode_id']}")


def _call(world: Path, calls: list[str]) -> None:
    with Served(world) as srv:
        _, errors = anyio.run(play, srv.url + "/mcp", [json.loads(c) for c in calls], True)
    for e in errors:
        print("error:", e)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["tools", "tasks", "call", "run"])
    parser.add_argument("world", type=Path, help="a world folder (for run --all: the worlds folder)")
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--names", action="store_true", help="tools: names only")
    parser.add_argument("--all", action="store_true", help="run: every world with a file in bench/blind/")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    if opts.command == "tools":
        _tools(opts.world, opts.names)
    elif opts.command == "tasks":
        _tasks(opts.world)
    elif opts.command == "call":
        _call(opts.world, opts.rest)
    else:
        pairs = ([(opts.world / f.stem, f) for f in sorted(BLIND.glob("*.jsonl"))] if opts.all else
                 [(opts.world, Path(opts.rest[0]) if opts.rest else BLIND / f"{opts.world.name}.jsonl")])
        results = []
        for world, solutions in pairs:
            if not world.is_dir():
                raise SystemExit(f"error: {world}: no such world folder (build it first)")
            print(f"{world.name}:")
            results.append(run_world(world, solutions, opts.verbose))
        if opts.json:
            print(json.dumps([{k: v for k, v in r.items() if k != "rows"} for r in results], indent=1))
        total = sum(r["tasks"] for r in results)
        for r in results:
            print(f"{r['world']:<40} tasks {r['tasks']:>3}  passed {r['passed']:>3}  failed {r['failed']:>2}  "
                  f"unfair {r['unfair']:>2}  guesses {r['guesses']:>2}  stale {r['stale']}")
        unfair = sum(r["unfair"] for r in results)
        print(f"all: {sum(r['passed'] for r in results)}/{total} passed, {unfair} graded unfairly "
              f"({unfair / total if total else 0:.1%}), {sum(r['guesses'] for r in results)} guesses")
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()


if __name__ == "__main__":
    main()

"""What the sandbox costs: worker start, a tool call inside it and outside, and a served episode's memory.

Builds one world into a temp folder (or uses WORLD_PATH), then prints: the confined worker's start
time; microseconds per tool call in this process (unconfined) and inside the worker (bubblewrap,
seccomp, audit hook) and through a RemoteEpisode (one pipe round trip per call); and the peak
resident memory of `worldfactory serve` (confined, over stdio) before and after 3,000 large searches
(limit 500 each). Usage: python bench/sandbox_bench.py [WORLD_PATH]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from proctree import tree_memory_mib  # bench/proctree.py: bench/ is the script's folder

from worldfactory import confine
from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world

CALLS = 2000
SERVED_CALLS = 3000


async def served_memory(path: Path, tool: str) -> tuple[float, float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "worldfactory.cli", "serve", str(path)])
    async with Client(params) as client:
        await client.call_tool(tool, {"limit": 500})
        me = os.getpid()
        kids = [int(c) for t in Path(f"/proc/{me}/task").iterdir() for c in (t / "children").read_text().split()]
        start = max(tree_memory_mib(k, "VmHWM") for k in kids)
        for _ in range(SERVED_CALLS):
            await client.call_tool(tool, {"limit": 500})
        return start, max(tree_memory_mib(k, "VmHWM") for k in kids)


def main() -> None:
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
    else:
        root = Path(tempfile.mkdtemp(prefix="wf-sandbox-bench-"))
        confine.set_unconfined(False)
        path = Path(build_world("insurance-claims.regional--v001", root).path)
    confine.shutdown()
    t = time.perf_counter()
    confine.worker()
    print(f"confined worker start: {time.perf_counter() - t:.3f} s (once per process)")
    world = World.open(path)
    manifest = world.tool_manifest
    get = next(t for t in manifest if t["kind"] == "get")
    args = get["examples"]["valid"]
    with world.episode() as ep:
        for _ in range(200):
            ep.call(get["name"], args)
        t = time.perf_counter()
        for _ in range(CALLS):
            ep.call(get["name"], args)
        here = (time.perf_counter() - t) / CALLS * 1e6
    remote = confine.open_world(path)
    inside = min(remote._worker.request("time_calls", world=remote._key, tool=get["name"], args=args, n=CALLS)
                 for _ in range(3))
    with remote.episode() as ep:
        t = time.perf_counter()
        for _ in range(CALLS):
            ep.call(get["name"], args)
        piped = (time.perf_counter() - t) / CALLS * 1e6
    print(f"{get['name']}: {here:.1f} us/call here, {inside:.1f} us/call inside the worker, "
          f"{piped:.1f} us/call through a RemoteEpisode (pipe round trip)")
    biggest = max(world.spec.tables, key=lambda t: len(world.seed_rows(t.name)))
    search = next(t for t in manifest if t["kind"] == "search" and t["table"] == biggest.name)
    start, end = asyncio.run(served_memory(path, search["name"]))
    print(f"served episode over stdio (confined): peak RSS {start:.0f} MiB after 1 call, {end:.0f} MiB after "
          f"{SERVED_CALLS} more {search['name']}(limit=500) calls")


if __name__ == "__main__":
    main()

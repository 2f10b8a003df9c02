"""Speed figures for the notes: build time, reset, tool call (in process and in-memory MCP), verify.

Not part of the test run. Prints one table, with the targets on its last line.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from worldfactory.runtime.mcp_server import build_server
from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


async def mcp_latencies(world: World, name: str, args: dict) -> list[float]:
    """Sequential calls over the in-memory MCP client, after 100 warm-up calls."""
    out: list[float] = []
    async with Client(build_server(world)) as client:
        for i in range(600):
            t0 = time.perf_counter()
            await client.call_tool(name, args)
            if i >= 100:
                out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ts = load_templates()
    out = Path(tempfile.mkdtemp(prefix="wf-bench-"))
    rows = []
    for wid in ts.catalog.examples:
        result = build_world(wid, out, ts, force=True)
        world = World.open(out / "worlds" / wid)
        resets = []
        for _ in range(300):
            t0 = time.perf_counter()
            ep = world.episode()
            resets.append(time.perf_counter() - t0)
            ep.close()
        read = next(t for t in world.tool_manifest if t["kind"] == "get")
        calls = []
        with world.episode() as ep:
            for _ in range(2000):
                t0 = time.perf_counter()
                ep.call(read["name"], read["examples"]["valid"])
                calls.append(time.perf_counter() - t0)
        mcp_calls = anyio.run(mcp_latencies, world, read["name"], read["examples"]["valid"])
        short = next(t for t in world.tasks.values() if t.family == "lookup_act")
        verifies = []
        for _ in range(200):
            with world.episode(short.task_id) as ep:
                for c in short.oracle:
                    ep.call(c.tool, c.args)
                t0 = time.perf_counter()
                ep.verify(short.answer)
                verifies.append(time.perf_counter() - t0)
        rows.append((wid, result.seconds, result.counts["rows"], p50(resets) * 1e3, p50(calls) * 1e6,
                     p50(mcp_calls) * 1e3, p50(verifies) * 1e3))
    print(f"{'world':40} {'build s':>8} {'rows':>6} {'reset ms':>9} {'call us':>8} {'mcp ms':>7} {'verify ms':>9}")
    for r in rows:
        print(f"{r[0]:40} {r[1]:8.2f} {r[2]:6d} {r[3]:9.3f} {r[4]:8.1f} {r[5]:7.3f} {r[6]:9.3f}")
    print("targets: reset p50 <= 0.2 ms (10k rows); call p50 <= 100 us in process, <= 1 ms over in-memory MCP; "
          "verify p50 <= 5 ms")


if __name__ == "__main__":
    main()

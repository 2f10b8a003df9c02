"""Task and verifier figures per world: families, horizons, mutant catch rate, verify latency.

Builds the given worlds (default: the catalog's examples) into a temp folder with the engine and
prints, per world: tasks per family, oracle length median/p95/max, mutants caught / equivalent /
missed, tasks dropped, and verify p50 for short tasks and for the 1,000-call task.
Usage: python bench/tasks_bench.py [WORLD_ID ...]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates


def verify_p50(world: World, task_id: str, n: int) -> float:
    task = world.task(task_id)
    times = []
    for _ in range(n):
        with world.episode(task_id) as ep:
            for call in task.oracle:
                ep.call(call.tool, call.args)
            t0 = time.perf_counter()
            ep.verify(task.answer)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ts = load_templates()
    ids = sys.argv[1:] or ts.catalog.examples
    out = Path(tempfile.mkdtemp(prefix="wf-tasks-bench-"))
    for wid in ids:
        result = build_world(wid, out, ts, force=True)
        world = World.open(out / "worlds" / wid)
        lengths = sorted(len(t.oracle) for t in world.tasks.values())
        v = world.manifest["verifier_validity"]
        families = ", ".join(f"{k} {n}" for k, n in world.manifest["task_families"].items())
        short = next(t.task_id for t in world.tasks.values() if len(t.oracle) <= 6 and t.answer is None)
        longest = max(world.tasks.values(), key=lambda t: len(t.oracle)).task_id
        print(f"{wid}: build {result.seconds:.1f} s, {len(lengths)} tasks ({families})")
        print(f"  horizon median {statistics.median(lengths):g}, p95 {lengths[int(0.95 * (len(lengths) - 1))]}, "
              f"max {lengths[-1]}, >= 50 calls: {sum(n >= 50 for n in lengths)}")
        print(f"  mutants {v['mutants']}: caught {v['caught']}, equivalent {v['equivalent']}, missed {v['missed']} "
              f"(caught rate {v['caught_rate']:.4f}); reordered {v['reordered_pass']}/{v['reordered_checked']}; "
              f"tasks dropped {v['dropped']}")
        print(f"  verify p50: short task {verify_p50(world, short, 200):.2f} ms, "
              f"{lengths[-1]}-call task {verify_p50(world, longest, 20):.2f} ms")


if __name__ == "__main__":
    main()

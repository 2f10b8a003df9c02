"""Dagster overhead: the same 20 worlds built by the engine alone and through Dagster, in one run.

Three passes, each into a fresh data root (the two through Dagster share one fresh on-disk instance):
  engine   build_world() per world, no Dagster;
  per-run  `worldfactory build` path, one Dagster run per world (the default, full isolation);
  batched  the same path with --batch, one run per range of worlds.
Prints wall and CPU seconds per world (this process and its confined worker) and the overhead
ratios (Dagster / engine); the aim is at most 1.1. CPU seconds are the steadier measure on a shared
machine. REGISTERED registers that many catalog worlds as partitions first (2,000 in the full
backfill; a range run reads every partition key, so the count matters), default just the N built.
"outside the stages" is each pass's CPU and wall less what its stages recorded (the catalog's cost
rows, make + proof): what the runner and Dagster add, measured within one pass, so it holds even when
the engine's own speed changes between passes (another session editing it, a busier machine).
Usage: python bench/dagster_bench.py [N_WORLDS] [BATCH] [REGISTERED]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pyarrow.parquet as pq

from worldfactory import confine
from worldfactory.seeds import catalog_world_ids
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates


def stage_seconds(data_root: Path, ids: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds the worlds' stages recorded: the sum of their rows in the catalog's costs table."""
    cpu = wall = 0.0
    for wid in ids:
        for path in (data_root / "catalog" / "costs" / f"world_id={wid}").glob("*.parquet"):
            table = pq.read_table(path, columns=["cpu_seconds", "wall_seconds"]).to_pydict()
            cpu, wall = cpu + sum(table["cpu_seconds"]), wall + sum(table["wall_seconds"])
    return cpu, wall


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    registered = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ts = load_templates()
    ids = catalog_world_ids(ts, variants=2)[:n]
    base = Path(tempfile.mkdtemp(prefix="wf-dagster-bench-"))
    os.environ["DAGSTER_HOME"] = str(base / "dagster_home")
    warnings.filterwarnings("ignore")

    def clocks() -> tuple[float, float]:
        return time.perf_counter(), time.process_time() + confine.worker_cpu_seconds()

    build_world(ids[0], base / "warm", ts, force=True)  # imports and the confined worker, outside the passes
    t0, c0 = clocks()
    for wid in ids:
        build_world(wid, base / "engine", ts, force=True)
    t1, c1 = clocks()
    engine, engine_cpu = t1 - t0, c1 - c0
    stages = {"engine": stage_seconds(base / "engine", ids)}

    from worldfactory_dagster.pipelines.partitions import world_partitions
    from worldfactory_dagster.pipelines.runner import build_worlds, open_instance
    from worldfactory_dagster.resources.world_store import WorldStore

    if registered > len(ids):  # the other worlds first, so the built ones stay one contiguous range
        others = [w for w in catalog_world_ids(ts, variants=20) if w not in set(ids)][:registered - len(ids)]
        open_instance().add_dynamic_partitions(world_partitions.name, others)
    timings = {}
    for name, size in (("per-run", 1), ("batched", batch)):
        store = WorldStore(root=str(base / name))
        t0, c0 = clocks()
        outcomes = build_worlds(ids, store, force=True, batch=size)
        t1, c1 = clocks()
        timings[name] = (t1 - t0, c1 - c0)
        stages[name] = stage_seconds(base / name, ids)
        assert all(o.ok for o in outcomes), [o.failure for o in outcomes if not o.ok]
        for wid in ids:  # same bytes whichever way they were built
            for f in (base / "engine" / "worlds" / wid).iterdir():
                assert f.read_bytes() == (base / name / "worlds" / wid / f.name).read_bytes(), (name, wid, f.name)

    k = len(ids)
    print(f"{k} worlds, seed types x v001-v002, {max(registered, k)} partitions registered; data under {base}")
    print(f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")

    def outside(name: str, wall: float, cpu: float) -> str:
        return (f"outside the stages {(wall - stages[name][1]) / k:.2f} wall, "
                f"{(cpu - stages[name][0]) / k:.2f} CPU s/world")

    print(f"engine alone                wall {engine:7.1f} s ({engine / k:.2f} s/world)   "
          f"CPU {engine_cpu:7.1f} s ({engine_cpu / k:.2f} s/world)   {outside('engine', engine, engine_cpu)}")
    for name, (secs, cpu) in timings.items():
        label = f"dagster {name}" + (f" (batch {batch})" if name == "batched" else "")
        print(f"{label:<28}wall {secs:7.1f} s ({secs / k:.2f} s/world)   CPU {cpu:7.1f} s ({cpu / k:.2f} s/world)   "
              f"ratio wall {secs / engine:.2f} CPU {cpu / engine_cpu:.2f}   "
              f"{outside(name, secs, cpu)}")


if __name__ == "__main__":
    main()

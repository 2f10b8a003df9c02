"""Dagster overhead: the same 20 worlds built by the engine alone and through Dagster, in one run.

Three passes, each into a fresh data root (and a fresh on-disk Dagster instance):
  engine   build_world() per world, no Dagster;
  per-run  `worldfactory build` path, one Dagster run per world (the default, full isolation);
  batched  the same path with --batch, one run per range of worlds.
Prints seconds per world and the overhead ratios (Dagster time / engine time); the aim is at
most 1.1. Usage: python bench/dagster_bench.py [N_WORLDS] [BATCH]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from worldfactory.seeds import catalog_world_ids
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    ts = load_templates()
    ids = catalog_world_ids(ts, variants=2)[:n]
    base = Path(tempfile.mkdtemp(prefix="wf-dagster-bench-"))
    os.environ["DAGSTER_HOME"] = str(base / "dagster_home")
    warnings.filterwarnings("ignore")

    t0 = time.perf_counter()
    for wid in ids:
        build_world(wid, base / "engine", ts, force=True)
    engine = time.perf_counter() - t0

    from pipelines.runner import build_worlds
    from resources.world_store import WorldStore

    timings = {}
    for name, size in (("per-run", 1), ("batched", batch)):
        store = WorldStore(root=str(base / name))
        t0 = time.perf_counter()
        outcomes = build_worlds(ids, store, force=True, batch=size)
        timings[name] = time.perf_counter() - t0
        assert all(o.ok for o in outcomes), [o.failure for o in outcomes if not o.ok]
        for wid in ids:  # same bytes whichever way they were built
            for f in (base / "engine" / "worlds" / wid).iterdir():
                assert f.read_bytes() == (base / name / "worlds" / wid / f.name).read_bytes(), (name, wid, f.name)

    print(f"{len(ids)} worlds, seed types x v001-v002; data under {base}")
    print(f"engine alone        {engine:7.1f} s  ({engine / len(ids):.2f} s/world)")
    for name, secs in timings.items():
        label = f"dagster {name}" + (f" (batch {batch})" if name == "batched" else "")
        print(f"{label:<20}{secs:7.1f} s  ({secs / len(ids):.2f} s/world)  overhead ratio {secs / engine:.2f}")


if __name__ == "__main__":
    main()

"""Worlds an hour for the whole catalog through Dagster: one world of every seed type, as a user builds them.

One `worldfactory build IDS --force --json --jobs J` process (batch: its default) into a fresh data
root and a fresh on-disk instance, timed end to end (process start, the builds, the catalog
refresh). The sample is variant VARIANT of every seed type of the catalog, so each domain pack and
company type weighs what it weighs in the full catalog (every seed type x 20 variants; a variant
changes the generation seed, not the size of the world). VARIANT 0 builds the whole catalog, every
variant of every seed type (2,000 worlds, about an hour). All catalog worlds are registered as
partitions first (the sample first, so it stays one contiguous range, then the rest), as in a full
build. Prints worlds an hour as run, the mean engine CPU per world (the costs catalog, make + proof),
the wall time outside the stages per world, and what that rate means for the full catalog.
Usage: python bench/catalog_throughput.py [JOBS] [VARIANT] [LIMIT]   (defaults: cores, 1, every seed type)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pyarrow.parquet as pq

from worldfactory.parallel import default_jobs
from worldfactory.seeds import catalog_world_ids
from worldfactory.templates import load_templates


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else default_jobs()
    variant = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ts = load_templates()
    every = catalog_world_ids(ts, variants=20)
    ids = (every if variant == 0 else [w for w in every if w.endswith(f"--v{variant:03d}")])[: limit or None]
    base = Path(tempfile.mkdtemp(prefix="wf-catalog-throughput-"))
    home, data = base / "dagster_home", base / "data"
    os.environ["DAGSTER_HOME"] = str(home)
    warnings.filterwarnings("ignore")
    from worldfactory_dagster.pipelines.partitions import world_partitions
    from worldfactory_dagster.pipelines.runner import open_instance

    instance = open_instance()
    instance.add_dynamic_partitions(world_partitions.name, ids)
    chosen = set(ids)
    rest = [w for w in every if w not in chosen]
    if rest:
        instance.add_dynamic_partitions(world_partitions.name, rest)
    instance.dispose()
    cmd = [sys.executable, "-m", "worldfactory.cli", "build", *ids, "--force", "--json", "--jobs", str(jobs),
           "--data", str(data)]
    load_before = open("/proc/loadavg").read().split()[:3]
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"build failed ({r.returncode}):\n{r.stderr[-3000:]}")
    rows = json.loads(r.stdout)
    assert sorted(row["world_id"] for row in rows) == sorted(ids) and not any(row["skipped"] for row in rows)
    cpu = stage_wall = 0.0
    for wid in ids:
        for path in (data / "catalog" / "costs" / f"world_id={wid}").glob("*.parquet"):
            table = pq.read_table(path, columns=["cpu_seconds", "wall_seconds"]).to_pydict()
            cpu, stage_wall = cpu + sum(table["cpu_seconds"]), stage_wall + sum(table["wall_seconds"])
    n = len(ids)
    rate = n / wall * 3600
    sample = "every variant" if variant == 0 else f"variant {variant}"
    print(f"{n} worlds ({sample} of the seed types), {len(every)} partitions registered, --jobs {jobs}; "
          f"data under {base}")
    print(f"load average before {' '.join(load_before)}, after {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"wall {wall:.1f} s: {rate:.0f} worlds an hour; the catalog's {len(every)} worlds would take "
          f"{len(every) / rate:.2f} h at this rate")
    print(f"engine CPU (stages, make + proof) {cpu / n:.2f} s a world; stage wall {stage_wall / n:.2f} s a world; "
          f"wall per world per worker {wall * jobs / n:.2f} s, of which outside the stages "
          f"{(wall * jobs - stage_wall) / n:.2f} s")


if __name__ == "__main__":
    main()

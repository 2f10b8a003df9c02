"""Worlds per hour with `worldfactory build --jobs 1` and `--jobs J`, through Dagster and engine only.

Four passes over the same N worlds, each a real `worldfactory build --force --json` process
into a fresh data root (and, through Dagster, a fresh on-disk instance), timed end to end:
process start, partition registration, the builds, and the catalog refresh. Every pass must
build every world, and the bundles must be byte-identical across passes.
Usage: python bench/factory_parallel_bench.py [N_WORLDS] [JOBS]   (defaults: 4 worlds, jobs = cores)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from worldfactory.parallel import default_jobs
from worldfactory.seeds import catalog_world_ids
from worldfactory.templates import load_templates


def build(ids: list[str], data: Path, home: Path, jobs: int, dagster: bool) -> float:
    cmd = [sys.executable, "-m", "worldfactory.cli", "build", *ids, "--force", "--json", "--jobs", str(jobs),
           "--data", str(data)] + ([] if dagster else ["--no-dagster"])
    env = dict(os.environ, DAGSTER_HOME=str(home))
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    rows = json.loads(r.stdout)
    assert [row["world_id"] for row in rows] == ids and not any(row["skipped"] for row in rows)
    return seconds


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else max(2, default_jobs())
    every = catalog_world_ids(load_templates())
    ids = list(dict.fromkeys(every[::max(1, len(every) // n)] + every))[:n]  # spread over seed types
    base = Path(tempfile.mkdtemp(prefix="wf-parallel-bench-"))
    timings: dict[tuple[str, int], float] = {}
    for path in ("engine", "dagster"):
        for j in (1, jobs):
            name = f"{path}-j{j}"
            timings[(path, j)] = build(ids, base / name, base / f"{name}-home", j, dagster=path == "dagster")
    reference = base / "engine-j1" / "worlds"
    for (path, j) in timings:  # same bytes whichever way they were built
        for wid in ids:
            for f in (reference / wid).iterdir():
                assert f.read_bytes() == (base / f"{path}-j{j}" / "worlds" / wid / f.name).read_bytes(), (path, j, f)

    print(f"{len(ids)} worlds ({ids[0]} ... {ids[-1]}), {os.cpu_count()} cores; data under {base}")
    for path in ("engine", "dagster"):
        for j in (1, jobs):
            secs = timings[(path, j)]
            speedup = timings[(path, 1)] / secs
            print(f"{path:<8} --jobs {j:<3} {secs:7.1f} s  {len(ids) / secs * 3600:7.0f} worlds/hour"
                  f"  speed-up x{speedup:.2f}")


if __name__ == "__main__":
    main()

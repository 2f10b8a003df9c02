"""Build worlds through the deployment: register them, launch a backfill of `world_build`, wait for its runs.

    source $DAGSTER_HOME/env.sh          # written by deploy/up.sh
    .venv/bin/python deploy/backfill.py WORLD [WORLD...] [--force] [--timeout SECONDS]

The backfill is Dagster's own (`dagster job backfill`): its runs go to the run queue, the daemon
starts them within the instance's limits, and DockerRunLauncher runs each in a container of the
code image. Prints one JSON object: the backfill's runs, each with its world, status and
container, and the wall time from launch to the last run's end. Exit 1 unless every run succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parent.parent
DONE = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def launch(worlds: list[str], force: bool) -> str:
    """Register the worlds as partitions and launch the backfill; its ID."""
    with dg.DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions("world"))
        new = [w for w in worlds if w not in known]
        if new:
            instance.add_dynamic_partitions("world", new)
        before = {b.backfill_id for b in instance.get_backfills()}
    tags = ["--tags", json.dumps({"worldfactory/force": "true"})] if force else []
    subprocess.run([str(ROOT / ".venv" / "bin" / "dagster"), "job", "backfill", "-w", str(ROOT / "workspace.yaml"),
                    "-j", "world_build", "--partitions", ",".join(worlds), "--noprompt", *tags],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    with dg.DagsterInstance.get() as instance:
        [backfill] = [b for b in instance.get_backfills() if b.backfill_id not in before]
        return backfill.backfill_id


def wait(backfill_id: str, count: int, timeout: float) -> dict:
    started = time.monotonic()
    with dg.DagsterInstance.get() as instance:
        while True:
            runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
            if len(runs) >= count and all(r.status in DONE for r in runs):
                break
            if time.monotonic() - started > timeout:
                break
            time.sleep(2)
        records = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    out = []
    for rec in sorted(records, key=lambda r: r.dagster_run.tags.get("dagster/partition", "")):
        run = rec.dagster_run
        out.append({"world_id": run.tags.get("dagster/partition"), "run_id": run.run_id, "status": run.status.value,
                    "container": run.tags.get("docker/container_id", ""), "image": run.tags.get("docker/image", ""),
                    "seconds": round((rec.end_time or 0) - (rec.start_time or 0), 3) if rec.end_time else None})
    return {"backfill_id": backfill_id, "runs": out, "wall_seconds": round(time.monotonic() - started, 3),
            "ok": len(out) == count and all(r["status"] == "SUCCESS" for r in out)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("worlds", nargs="+", metavar="WORLD")
    p.add_argument("--force", action="store_true", help="rebuild worlds that are up to date")
    p.add_argument("--timeout", type=float, default=1800.0)
    args = p.parse_args(argv)
    if not os.environ.get("DAGSTER_HOME"):
        print("DAGSTER_HOME is not set: run deploy/up.sh, then source $DAGSTER_HOME/env.sh", file=sys.stderr)
        return 2
    result = wait(launch(args.worlds, args.force), len(args.worlds), args.timeout)
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""World images by the numbers: build time per world, layer and image sizes, container start to the first
MCP answer, and worlds per hour through deploy/ (DockerRunLauncher on PostgreSQL) against in-process.

Needs `make images` first (the engine, the runtime image and the example worlds' bundles) and PostgreSQL
on 127.0.0.1:5432 for the deployment pass (a fresh database, dropped at the end).
1. Each example world's image is removed and built again on the present runtime image (what a new or
   changed bundle costs), built once more unchanged (reused), and probed (start to first MCP answer).
2. The same N catalog worlds are built by `worldfactory build --jobs J` (Dagster in process, SQLite)
   and by a backfill through deploy/ (the daemon's queue, J world builds at once, each run in its own
   container); both into fresh data roots, and the bundles must be byte-identical. Both use a copy of
   world_templates/ without registry.yaml: the deployment's registration sensor would otherwise build
   the registry's worlds beside the backfill, in the same queue.
Usage: python bench/images_bench.py [N_WORLDS] [J]   (defaults: 4 worlds, 2 at once)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg2

from worldfactory.images.engine import connect, engine_url
from worldfactory.images.probe import probe_image
from worldfactory.images.runtime import ensure_runtime
from worldfactory.images.world import build_world_image
from worldfactory.seeds import catalog_world_ids
from worldfactory.templates import load_templates

ROOT = Path(__file__).resolve().parent.parent
PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def images(data: Path) -> None:
    client = connect()
    started = time.perf_counter()
    runtime, built = ensure_runtime(client)
    print(f"runtime {runtime}: {'built' if built else 'present'} in {time.perf_counter() - started:.1f} s, "
          f"{client.images.get(runtime).attrs['Size'] / 1e6:.0f} MB")
    for wid in load_templates().catalog.examples:
        bundle = data / "worlds" / wid
        first = build_world_image(bundle, client, runtime=runtime)
        client.images.remove(first.image, force=True)
        first = build_world_image(bundle, client, runtime=runtime)
        again = build_world_image(bundle, client, runtime=runtime)
        probe = probe_image(first.image, bundle, client)
        assert first.built and not again.built and probe.passed, probe.reason
        print(f"{wid}: image built in {first.seconds:.1f} s (unchanged: reused in {again.seconds:.2f} s); "
              f"bundle layer {first.layer_bytes / 1e6:.1f} MB, image {first.image_bytes / 1e6:.0f} MB; "
              f"start to first MCP answer {probe.first_answer_seconds:.2f} s, {probe.tools} tools, "
              f"oracle reward {probe.reward}, stop {probe.stop_seconds:.2f} s")


def in_process(ids: list[str], data: Path, jobs: int) -> float:
    env = dict(os.environ, DAGSTER_HOME=str(data.parent / "in-process-home"))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "worldfactory.cli", "build", *ids, "--json", "--jobs", str(jobs),
                    "--data", str(data)], check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def deployed(ids: list[str], data: Path, jobs: int) -> tuple[float, float]:
    """(seconds for deploy/up.sh, seconds from the backfill's launch to its last run's end)."""
    name = f"wf_bench_{secrets.token_hex(4)}"
    env = {**os.environ, "DOCKER_HOST": engine_url(), "DAGSTER_HOME": str(data.parent / "deploy-home"),
           "WORLDFACTORY_DATA": str(data), "DAGSTER_PG_URL": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}",
           "WORLDFACTORY_WORLD_BUILDS": str(jobs), "WORLDFACTORY_MAX_RUNS": str(jobs)}
    client = connect()
    runs: list[str] = []
    try:
        started = time.perf_counter()
        subprocess.run([str(ROOT / "deploy" / "up.sh")], check=True, env=env, stdout=subprocess.DEVNULL)
        up = time.perf_counter() - started
        out = subprocess.run([sys.executable, str(ROOT / "deploy" / "backfill.py"), *ids], env=env,
                             capture_output=True, text=True)
        result = json.loads(out.stdout)
        runs = [r["run_id"] for r in result["runs"]]
        assert result["ok"] and len({r["container"] for r in result["runs"]}) == len(ids), out.stdout + out.stderr
        return up, float(result["wall_seconds"])
    finally:
        subprocess.run([str(ROOT / "deploy" / "up.sh"), "stop"], env=env, stdout=subprocess.DEVNULL)
        for run in runs:  # every container of the backfill's runs, by the label DockerRunLauncher gives it
            for container in client.containers.list(all=True, filters={"label": f"dagster/run_id={run}"}):
                container.remove(force=True)
        conn = psycopg2.connect(PG)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    images(Path(os.environ.get("WORLDFACTORY_DATA", ROOT / "data")))
    every = catalog_world_ids(load_templates())
    examples = set(load_templates().catalog.examples)
    ids = [w for w in dict.fromkeys(every[::max(1, len(every) // n)] + every) if w not in examples][:n]
    base = Path(tempfile.mkdtemp(prefix="wf-images-bench-"))
    templates = shutil.copytree(ROOT / "world_templates", base / "templates")
    (templates / "registry.yaml").unlink()
    os.environ["WORLDFACTORY_TEMPLATES"] = str(templates)  # both passes, and deploy/up.sh mounts it
    local = in_process(ids, base / "in-process", jobs)
    up, remote = deployed(ids, base / "deploy", jobs)
    for wid in ids:
        prints = {json.loads((base / way / "worlds" / wid / "world.json").read_bytes())["inputs_fingerprint"]
                  for way in ("in-process", "deploy")}
        assert len(prints) == 1, f"{wid}: the engine's source or templates changed between the passes (edited?)"
        for f in sorted((base / "in-process" / "worlds" / wid).iterdir()):
            assert f.read_bytes() == (base / "deploy" / "worlds" / wid / f.name).read_bytes(), (wid, f.name)
    print(f"{n} worlds ({ids[0]} ... {ids[-1]}), {jobs} at once, {os.cpu_count()} cores; bundles identical")
    print(f"in process (worldfactory build --jobs {jobs}): {local:.1f} s, {n * 3600 / local:.0f} worlds/h")
    print(f"deploy/ (backfill, DockerRunLauncher): {remote:.1f} s, {n * 3600 / remote:.0f} worlds/h "
          f"(deploy/up.sh before it: {up:.1f} s)")


if __name__ == "__main__":
    main()

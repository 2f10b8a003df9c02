"""The deployment end to end: PostgreSQL instance, run queue, DockerRunLauncher, a backfill of two worlds.

deploy/up.sh prepares everything (a fresh database here), deploy/backfill.py launches Dagster's own
backfill; each run must have run in its own container, the world-build limit (1 here) must have kept
the runs apart, and every bundle must be byte for byte the bundle an in-process build makes.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import dagster as dg
import docker
import psycopg2
import pytest

from tests.conftest import ROOT, SMALL
from worldfactory.images.engine import connect, engine_url
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

PG = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def database() -> str:
    name = f"wf_deploy_{secrets.token_hex(4)}"
    conn = psycopg2.connect(PG)
    conn.autocommit = True
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


def test_a_backfill_builds_worlds_in_containers_identical_to_in_process(tmp_path: Path, small_templates: Path,
                                                                        database: str) -> None:
    client: docker.DockerClient = connect()
    env = {**os.environ, "DOCKER_HOST": engine_url(), "DAGSTER_HOME": str(tmp_path / "home"),
           "WORLDFACTORY_DATA": str(tmp_path / "data"), "WORLDFACTORY_TEMPLATES": str(small_templates),
           "DAGSTER_PG_URL": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{database}",
           "WORLDFACTORY_WORLD_BUILDS": "1"}
    up = subprocess.run([str(ROOT / "deploy" / "up.sh")], env=env, capture_output=True, text=True, timeout=1200)
    assert up.returncode == 0, up.stdout + up.stderr
    containers: list[str] = []
    try:
        out = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "deploy" / "backfill.py"), *SMALL,
                              "--timeout", "900"], env=env, capture_output=True, text=True, timeout=1000)
        result = json.loads(out.stdout)
        containers = [r["container"] for r in result["runs"] if r["container"]]
        assert out.returncode == 0 and result["ok"], out.stdout + out.stderr
        assert sorted(r["world_id"] for r in result["runs"]) == sorted(SMALL)
        assert len(set(containers)) == len(SMALL)  # each run in its own container
        for cid in containers:
            assert client.containers.get(cid).attrs["State"]["ExitCode"] == 0

        os.environ["DAGSTER_HOME"], saved = env["DAGSTER_HOME"], os.environ.get("DAGSTER_HOME")
        os.environ["DAGSTER_PG_URL"] = env["DAGSTER_PG_URL"]
        try:
            with dg.DagsterInstance.get() as instance:
                assert type(instance.run_storage).__name__ == "PostgresRunStorage"
                records = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": result["backfill_id"]}))
        finally:
            os.environ.pop("DAGSTER_PG_URL", None)
            if saved is None:
                os.environ.pop("DAGSTER_HOME", None)
            else:
                os.environ["DAGSTER_HOME"] = saved
        spans = sorted((r.start_time, r.end_time) for r in records)
        assert len(spans) == 2 and spans[0][1] <= spans[1][0]  # the world-build limit of 1 kept them apart
        assert all(r.dagster_run.tags["worldfactory/queue"] == "world_build" for r in records)

        local = tmp_path / "local"
        ts = load_templates(str(small_templates))
        for wid in SMALL:
            build_world(wid, local, templates=ts)
            ours = {p.name: p.read_bytes() for p in sorted((tmp_path / "data" / "worlds" / wid).iterdir())}
            theirs = {p.name: p.read_bytes() for p in sorted((local / "worlds" / wid).iterdir())}
            fingerprints = [json.loads(b["world.json"])["inputs_fingerprint"] for b in (ours, theirs)]
            assert fingerprints[0] == fingerprints[1], ("the engine's source differs between the code image and "
                                                        "this tree (was it edited during the test?)")
            assert sorted(ours) == sorted(theirs)
            assert [n for n in ours if ours[n] != theirs[n] and n != "world.json"] == [], wid
            # world.json also records the boundary the generated code ran under, which is no input: in the
            # container bubblewrap cannot make namespaces, so it may differ there; nothing else may
            manifests = [json.loads(b["world.json"]) for b in (ours, theirs)]
            boundaries = [m.pop("boundary") for m in manifests]
            assert manifests[0] == manifests[1], (wid, boundaries)
    finally:
        subprocess.run([str(ROOT / "deploy" / "up.sh"), "stop"], env=env, capture_output=True, timeout=60)
        for cid in containers:
            try:
                client.containers.get(cid).remove(force=True)
            except docker.errors.NotFound:
                pass

"""Builds through Dagster that were killed: the run ends FAILURE, not STARTED forever; lost catalog rows return.

`worldfactory build` runs `world_build` with execute_in_process, so there is no run worker for the
daemon's run monitoring to check (the default run launcher does not support worker health checks):
a build killed with SIGKILL leaves its run STARTED. The CLI tags every run with its process (host,
pid, start time) and, at its next start, fails the in-progress runs of processes that are gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import dagster as dg
import duckdb

from tests.conftest import PYTHON, SMALL, small_templates_at
from worldfactory_dagster.pipelines.runner import INSTANCE_YAML, PROCESS_TAG, fail_dead_runs, process_tag

WORLD = SMALL[0]


def _env(tmp: Path, templates: Path) -> dict[str, str]:
    return dict(os.environ, WORLDFACTORY_TEMPLATES=str(templates), WORLDFACTORY_DATA=str(tmp / "data"),
                DAGSTER_HOME=str(tmp / "dagster-home"))


def _build(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", "build", WORLD, *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_killed_build_run_ends_failed_and_lost_catalog_rows_come_back(tmp_path: Path) -> None:
    templates = small_templates_at(tmp_path / "templates")
    env = _env(tmp_path, templates)
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)  # what the CLI writes: opened here first, to watch it
    with dg.DagsterInstance.from_config(str(home)) as instance:
        proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "build", WORLD], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 180
            started: list[dg.DagsterRun] = []
            while not started and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
                started = list(instance.get_runs(dg.RunsFilter(job_name="world_build",
                                                               statuses=[dg.DagsterRunStatus.STARTED])))
            assert started, "the build's run never showed as STARTED"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the build and its confined worker, mid-build
            proc.wait()
    [killed] = started
    assert killed.tags[PROCESS_TAG].split(":")[1] == str(proc.pid)
    assert not (tmp_path / "data" / "worlds" / WORLD).exists()  # killed before publishing
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.STARTED  # and nothing changes that:
        assert not instance.run_launcher.supports_check_run_worker_health  # the daemon's monitoring cannot see it
        assert "run_monitoring" in (home / "dagster.yaml").read_text()

    again = _build(env)
    assert again.returncode == 0, again.stderr
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(killed.run_id)
        assert run.status == dg.DagsterRunStatus.FAILURE
        [failure] = instance.all_logs(killed.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert f"({proc.pid} on " in failure.message and "killed or crashed mid-build" in failure.message
        latest = [r for r in instance.get_runs(dg.RunsFilter(job_name="world_build")) if r.run_id != killed.run_id]
        assert [r.status for r in latest] == [dg.DagsterRunStatus.SUCCESS]

    # Published, then the catalog rows were lost (a kill between the two): the next build through
    # Dagster is cached, and writes the rows again.
    catalog = tmp_path / "data" / "catalog"
    parts = {t: catalog / t / f"world_id={WORLD}" for t in ("worlds", "tasks")}
    before = {t: sorted(p.read_bytes() for p in d.glob("*.parquet")) for t, d in parts.items()}
    assert all(before.values())
    for d in parts.values():
        shutil.rmtree(d)
    cached = _build(env, "--json")
    assert cached.returncode == 0, cached.stderr
    assert '"skipped": true' in cached.stdout, cached.stdout[:400]  # cached: the repair, not a rebuild
    assert {t: sorted(p.read_bytes() for p in d.glob("*.parquet")) for t, d in parts.items()} == before
    con = duckdb.connect(str(tmp_path / "data" / "catalog.duckdb"), read_only=True)
    con.execute(f"SET file_search_path = '{tmp_path / 'data'}'")  # the views' paths are relative to the data root
    assert con.execute("SELECT count(*) FROM worlds WHERE world_id = ?", [WORLD]).fetchone() == (1,)
    assert con.execute("SELECT count(*) FROM tasks WHERE world_id = ?", [WORLD]).fetchone()[0] > 0


def test_only_runs_of_dead_processes_are_failed(tmp_path: Path) -> None:
    """A run of a live build (this process), of another host, or a pid reused by a newer process stays."""
    sleeper = subprocess.Popen(["sleep", "0"])
    sleeper.wait()  # a pid that was a build and is gone
    host, pid, ticks = process_tag().split(":")
    tags = {"dead": f"{host}:{sleeper.pid}:{ticks}", "live": process_tag(), "elsewhere": f"other-host:{sleeper.pid}:1",
            "reused": f"{host}:{pid}:{int(ticks or 0) - 1}", "untagged": ""}
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        ids = {}
        for name, tag in tags.items():
            run = instance.add_run(dg.DagsterRun(job_name="world_build", status=dg.DagsterRunStatus.STARTED,
                                                 tags={PROCESS_TAG: tag} if tag else {}))
            ids[name] = run.run_id
        failed = fail_dead_runs(instance)
        assert sorted(failed) == sorted([ids["dead"], ids["reused"]])
        status = {name: instance.get_run_by_id(rid).status for name, rid in ids.items()}
        assert status == {"dead": dg.DagsterRunStatus.FAILURE, "live": dg.DagsterRunStatus.STARTED,
                          "elsewhere": dg.DagsterRunStatus.STARTED, "reused": dg.DagsterRunStatus.FAILURE,
                          "untagged": dg.DagsterRunStatus.STARTED}
        assert fail_dead_runs(instance) == []  # already failed: left alone

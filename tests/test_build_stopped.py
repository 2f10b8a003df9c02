"""A build stopped with SIGTERM (or Ctrl-C) ends promptly with no Dagster run left in progress and no
half-made scratch file behind; scratch a killed build left is removed when the next build starts (issue 35)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import PYTHON, SMALL, small_templates_at
from worldfactory_dagster.pipelines.runner import IN_PROGRESS, INSTANCE_YAML, clean_scratch


def _scratch(data: Path) -> list[Path]:
    return sorted([*data.glob("worlds/.staging-*"), *data.glob("build/.engine-*"), *data.glob("build/**/.*.tmp-*")])


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_stopped_build_leaves_no_run_in_progress_and_no_scratch(tmp_path: Path, jobs: str) -> None:
    templates = small_templates_at(tmp_path / "templates")
    data, home = tmp_path / "data", tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    env = dict(os.environ, WORLDFACTORY_TEMPLATES=str(templates), WORLDFACTORY_DATA=str(data), DAGSTER_HOME=str(home))
    gone = subprocess.Popen(["sleep", "0"])
    gone.wait()  # a pid whose build was killed: what it left half-made
    planted = [data / "worlds" / f".staging-{SMALL[0]}-{gone.pid}", data / "build" / f".engine-{SMALL[1]}-{gone.pid}",
               data / "build" / SMALL[0] / f".seed.db.tmp-{gone.pid}"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if ".tmp-" not in path.name else path.write_bytes(b"half")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "build", *SMALL, "--jobs", jobs, "--batch", "1"],
                                env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        try:
            deadline = time.monotonic() + 180
            started: list[dg.DagsterRun] = []
            while not started and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
                started = list(instance.get_runs(dg.RunsFilter(job_name="world_build",
                                                               statuses=[dg.DagsterRunStatus.STARTED])))
            assert started, "the build's run never showed as STARTED"
            assert not any(p.exists() for p in planted)  # removed as the build started: their process is gone
            time.sleep(0.5)  # mid-stage
            proc.send_signal(signal.SIGTERM)  # the build alone, as a service manager or `kill` would
            stopped = time.monotonic()
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        took = time.monotonic() - stopped
        assert proc.returncode == 130, err[-2000:]
        assert "the build was stopped" in err
        assert took < 20, f"took {took:.1f} s to stop"
        # promptly: before any next build, no run of this one is in progress
        left = list(instance.get_runs(dg.RunsFilter(job_name="world_build", statuses=IN_PROGRESS)))
        assert left == [], [(r.run_id, r.status) for r in left]
        for run in started:  # cut short, or (a signal between its last step and its end) finished whole
            assert instance.get_run_by_id(run.run_id).status in (dg.DagsterRunStatus.FAILURE,
                                                                 dg.DagsterRunStatus.SUCCESS)
    assert _scratch(data) == []
    for world in (data / "worlds").iterdir() if (data / "worlds").is_dir() else []:
        assert (world / "world.json").is_file(), f"half a world published: {world}"  # whole, or not there


def test_clean_scratch_leaves_live_builds_alone(tmp_path: Path) -> None:
    live = tmp_path / "build" / f".engine-w-{os.getppid()}"  # a live process that is not this one
    mine = tmp_path / "worlds" / f".staging-w-{os.getpid()}"
    for path in (live, mine):
        path.mkdir(parents=True)
    assert clean_scratch(tmp_path) == [] and live.is_dir() and mine.is_dir()
    assert clean_scratch(tmp_path, own=True) == [mine] and live.is_dir() and not mine.exists()

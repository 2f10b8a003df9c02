"""`worldfactory build --jobs N --no-dagster`: worlds built side by side in worker processes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, SMALL, small_templates_at
from worldfactory.parallel import emit, run_in_processes

BROKEN, FINE = SMALL


def _square(x: int) -> int:
    emit("started", x, os.getpid())
    if x == 3:
        raise ValueError("three is refused")
    return x * x


def _die(x: int) -> int:
    os._exit(3)


def test_pool_reports_results_errors_events_and_dead_workers() -> None:
    results, events = {}, []
    run_in_processes(_square, [1, 2, 3, 4], 2, on_result=lambda item, res, err: results.update({item: (res, err)}),
                     on_event=lambda *e: events.append(e))
    assert {k: v[0] for k, v in results.items()} == {1: 1, 2: 4, 3: None, 4: 16}
    assert isinstance(results[3][1], ValueError) and "three is refused" in str(results[3][1])
    assert sorted(e[1] for e in events) == [1, 2, 3, 4] and os.getpid() not in {e[2] for e in events}
    died: dict = {}
    run_in_processes(_die, [1], 2, on_result=lambda item, res, err: died.update({item: err}))
    assert died[1] is not None  # the pool's own error: the worker process is gone


def test_engine_jobs_builds_side_by_side_and_names_the_failure(tmp_path: Path, small_data: Path) -> None:
    """Two worlds in two processes: the broken one is named with its stage, check and reason; the
    other is byte for byte the serial build (its inputs fingerprint ignores the other domain's pack).
    On the small template set: the pool's mechanics, not the worlds' size."""
    templates = small_templates_at(tmp_path / "templates")
    pack = templates / "domains" / "help-desk.yaml"
    pack.write_text(pack.read_text().replace("  - name: requests\n", (
        "  - name: orphan_ledger\n    singular: orphan entry\n    label: memo\n    rows: 5\n    columns:\n"
        "      - {name: memo, gen: company_name}\n  - name: requests\n"), 1))
    env = dict(os.environ, WORLDFACTORY_TEMPLATES=str(templates))
    data = tmp_path / "data"
    cmd = [PYTHON, "-m", "worldfactory.cli", "build", BROKEN, FINE, "--no-dagster", "--jobs", "2", "--json",
           "--data", str(data)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 1, r.stderr
    assert (f"error: {BROKEN} was not built: {BROKEN}: stage world_schema failed its check 'schema_loads'"
            in " ".join(r.stderr.split()))
    assert "orphan_ledger" in r.stderr
    [row] = json.loads(r.stdout)
    assert row["world_id"] == FINE and not row["skipped"] and 0 < row["seconds"] < 600
    ours, serial = data / "worlds" / FINE, small_data / "worlds" / FINE
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in serial.iterdir())
    for f in serial.iterdir():
        assert (ours / f.name).read_bytes() == f.read_bytes(), f.name
    assert not (data / "worlds" / BROKEN).exists()
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 1
    assert [r["skipped"] for r in json.loads(again.stdout)] == [True]  # up to date: answered without a worker

"""`worldfactory build --all`: the registry's worlds from the command line, through Dagster."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, SMALL


def _build_all(templates: Path, data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WORLDFACTORY_TEMPLATES": str(templates), "WORLDFACTORY_DATA": str(data),
           "DAGSTER_HOME": str(data.parent / "dagster-home")}
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", "build", "--all", "--json", "--jobs", "1", *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def test_build_all_builds_what_the_registry_wants(tmp_path: Path, small_templates: Path) -> None:
    data = tmp_path / "data"
    r = _build_all(small_templates, data)
    assert r.returncode == 0, r.stderr
    assert sorted(row["world_id"] for row in json.loads(r.stdout)) == sorted(SMALL)  # registry.yaml: 2 x 1
    assert all((data / "worlds" / wid / "world.json").is_file() for wid in SMALL)


def test_build_all_refuses_a_bad_brief_file_before_any_work(tmp_path: Path, small_templates: Path) -> None:
    data = tmp_path / "data"
    (data / "briefs").mkdir(parents=True)
    bad = data / "briefs" / "acme.yaml"
    bad.write_text("domain: no-such-domain\ncompany_type: small\n")
    r = _build_all(small_templates, data)
    assert r.returncode == 2
    assert str(bad) in r.stderr and not (data / "worlds").exists()

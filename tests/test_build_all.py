"""`worldfactory build --all`: the registry's worlds from the command line, through Dagster.

The build itself (`build --all --jobs 2` builds the registry's two worlds, registers and catalogs
them) is test_dagster.py::test_cli_build_registers_and_delete_removes, which builds those same two
worlds through the CLI: one build of them, not two."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON


def _build_all(templates: Path, data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WORLDFACTORY_TEMPLATES": str(templates), "WORLDFACTORY_DATA": str(data),
           "DAGSTER_HOME": str(data.parent / "dagster-home")}
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", "build", "--all", "--json", "--jobs", "1", *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def test_build_all_refuses_a_bad_brief_file_before_any_work(tmp_path: Path, small_templates: Path) -> None:
    data = tmp_path / "data"
    (data / "briefs").mkdir(parents=True)
    bad = data / "briefs" / "acme.yaml"
    bad.write_text("domain: no-such-domain\ncompany_type: small\n")
    r = _build_all(small_templates, data)
    assert r.returncode == 2
    assert str(bad) in r.stderr and not (data / "worlds").exists()

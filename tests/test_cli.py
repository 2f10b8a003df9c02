"""The CLI as a user runs it: a real subprocess per command."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, SMALL
from worldfactory.templates import load_templates

WORLD = SMALL[1]  # a world of the small template set: the CLI's mechanics, built in seconds


def wf(*args: str, data: Path | None = None, templates: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if templates is not None:
        env["WORLDFACTORY_TEMPLATES"] = str(templates)
    if data is not None:
        env["WORLDFACTORY_DATA"] = str(data)
        env["DAGSTER_HOME"] = str(data.parent / f"{data.name}-dagster-home")
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_seeds() -> None:
    r = wf("seeds", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    catalog = load_templates().catalog
    assert "insurance-claims.regional" in out["seed_types"]
    assert len(out["seed_types"]) == len(catalog.domains) * len(catalog.company_types)
    assert "litigation-firm" in wf("seeds").stdout


def test_build_show_run(tmp_path: Path, small_templates: Path) -> None:
    run = functools.partial(wf, templates=small_templates)
    # The engine path; the same command through Dagster (its default): test_dagster.py, test_dagster_recovery.py
    r = run("build", WORLD, "--no-dagster", data=tmp_path)
    assert r.returncode == 0, r.stderr
    assert WORLD in r.stdout and "cached" not in r.stdout.split("oracle:")[0]
    assert (tmp_path / "worlds" / WORLD / "world.json").is_file()
    again = run("build", WORLD, "--no-dagster", "--json", data=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)[0]["skipped"] is True

    show = run("show", WORLD, "--json", data=tmp_path)
    manifest = json.loads(show.stdout)
    assert manifest["world_id"] == WORLD and manifest["counts"]["tools"] >= 37
    assert "task families" in run("show", WORLD, data=tmp_path).stdout

    task_id = "bulk-001"
    ok = json.loads(run("run", WORLD, task_id, "--policy", "oracle", "--json", data=tmp_path).stdout)
    assert ok["passed"] is True and ok["reward"] == 1 and ok["steps"] >= 3 and ok["mismatches"] == []
    bad = json.loads(run("run", str(tmp_path / "worlds" / WORLD), task_id, "--policy", "null", "--json").stdout)
    assert bad["passed"] is False and bad["reward"] == 0 and bad["steps"] == 0 and bad["mismatches"]
    text = run("run", WORLD, task_id, data=tmp_path).stdout
    assert "PASSED" in text


def test_errors_are_clear(tmp_path: Path) -> None:
    r = wf("build", "insurance-claims.megacorp--v001", data=tmp_path)
    assert r.returncode == 2 and "unknown company type 'megacorp'" in r.stderr
    r = wf("show", "no-such-world", data=tmp_path)
    assert r.returncode == 2 and "worldfactory build" in r.stderr
    r = wf("build", "garbage", data=tmp_path)
    assert r.returncode == 2 and "not a world ID" in r.stderr
    assert not (tmp_path / "worlds").exists() or not any((tmp_path / "worlds").iterdir())


def test_brief_file_builds_its_own_world(tmp_path: Path, small_templates: Path) -> None:
    """On the small template set: the brief file's mechanics, not the world's size."""
    run = functools.partial(wf, data=tmp_path, templates=small_templates)
    briefs = tmp_path / "briefs"
    briefs.mkdir(parents=True)
    (briefs / "acme-desk.yaml").write_text(
        "domain: help-desk\ncompany_type: small\ncompany_name: Acme Desk\nrules: {credit_limit: 1234}\n")
    r = run("build", "brief.acme-desk--v001", "--no-dagster", "--json")
    assert r.returncode == 0, r.stderr
    brief = json.loads((tmp_path / "worlds" / "brief.acme-desk--v001" / "brief.json").read_text())
    assert brief["company_name"] == "Acme Desk" and brief["rules"]["credit_limit"] == 1234
    assert brief["seed_type"] == "help-desk.small"
    (briefs / "acme-desk.yaml").write_text("domain: help-desk\ncompany_type: small\nrules: {free_lunch: 1}\n")
    bad = run("build", "brief.acme-desk--v002", "--no-dagster")
    assert bad.returncode == 2
    assert "acme-desk.yaml: field 'rules.free_lunch'" in bad.stderr
    missing = run("build", "brief.nowhere--v001", "--no-dagster")
    assert missing.returncode == 2 and "nowhere.yaml: no such brief file" in missing.stderr
    assert sorted(p.name for p in (tmp_path / "worlds").iterdir()) == ["brief.acme-desk--v001"]

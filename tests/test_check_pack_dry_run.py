"""Authoring that tells you (issue 31): `check-pack` dry-runs a domain pack (a small world built up to its
tasks in a temporary folder) and names the pack file and field of each failure with what to change; it
notes unreachable statuses, `from` statuses no row can hold and steps no task uses, with the reason; a
step flagged `bulk: false` is kept out of bulk, sweep and year-end tasks; a failed rebuild over a
published world says so in `build` and in the catalog while the old bundle stays."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import worldfactory.stages.pipeline
from tests.conftest import PYTHON, ROOT, SMALL
from worldfactory.generate.tasks import generate_tasks
from worldfactory.pack_flow import flow_lines
from worldfactory.spec import DomainPack, Transition, WorldSpec
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, StageError
from worldfactory.stages.pipeline import StageFailed, build_world
from worldfactory.templates import load_model, load_templates

PACK = "domains/insurance-claims.yaml"
BULK = ("bulk",)  # the family bulk, sweep and year-end tasks are filed under


def _templates(tmp_path: Path) -> Path:
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    return root


def _plant(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _check_pack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", "check-pack", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_dry_run_names_file_and_field_of_a_failure_only_a_build_finds(tmp_path: Path) -> None:
    pack = _templates(tmp_path) / PACK
    _plant(pack, "      - {name: full_name, unique: true, gen: person_name}",
           "      - {name: full_name, unique: true, gen: {choice: [Ada Lee, Bo Chen]}}")
    static = _check_pack("--static", str(pack))
    assert static.returncode == 0, static.stdout + static.stderr  # the files read well: only a build finds it
    run = _check_pack(str(pack))
    assert run.returncode == 2, run.stdout + run.stderr
    [line] = [x for x in run.stdout.splitlines() if not x.startswith("note: ")]
    assert line.startswith(f"{pack}: field 'tables[0:policyholders].columns[0:full_name]': seed_database (world "
                           f"insurance-claims.startup--v001): ")
    assert "could not draw a unique value" in line and "enough choices for a unique column" in line
    assert "Traceback" not in run.stdout + run.stderr and "check-pack-" not in line  # no temp folder named


def test_unreachable_statuses_and_from_statuses_no_row_holds_are_named(tmp_path: Path) -> None:
    root = _templates(tmp_path)
    pack = root / PACK
    _plant(pack, "      - {name: status, enum: [filed, under_review, fraud_review, escalated, approved, denied, paid, "
                 "closed], gen:",
           "      - {name: status, enum: [filed, under_review, fraud_review, escalated, approved, denied, paid, "
           "closed, archived], gen:")
    _plant(pack, "        - name: close_claim\n", "        - name: unarchive_claim\n          from: [archived]\n"
           "          to: filed\n          verb: \"unarchive {obj}\"\n        - name: close_claim\n")
    model = load_model(pack, DomainPack)
    modules = load_templates(root).modules
    composed = [t for m in model.modules for t in modules[m].tables]
    lines = flow_lines(pack, model.tables, list(model.derive), composed)
    claims = next(i for i, t in enumerate(model.tables) if t.name == "claims")
    status = next(j for j, c in enumerate(model.tables[claims].columns) if c.name == "status")
    k = next(k for k, tr in enumerate(model.tables[claims].workflow.transitions) if tr.name == "unarchive_claim")
    assert (f"{pack}: field 'tables[{claims}:claims].columns[{status}:status].enum': status 'archived' is "
            f"unreachable: no seeded row holds it (its gen draws filed, under_review, fraud_review, escalated, "
            f"approved, denied, paid, closed)") in "\n".join(lines)
    assert any(x.startswith(f"{pack}: field 'tables[{claims}:claims].workflow.transitions[{k}:unarchive_claim]"
                            f".from[0]': no row can hold status 'archived'") for x in lines)
    # the shipped pack's old finding is gone: a fraud review is created pending, then cleared or confirmed
    assert not any("status 'confirmed' is unreachable" in x for x in lines), lines


def test_a_step_flagged_out_of_bulk_is_in_no_bulk_sweep_or_year_end_task(worlds_dir: Path) -> None:
    bundle = worlds_dir / "insurance-claims.regional--v001"
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    tools = {t["name"] for t in json.loads((bundle / "tools.json").read_text())}
    seed = (bundle / "seed.db").read_bytes()
    steps = {tr.name for t in spec.tables if t.workflow for tr in t.workflow.transitions}
    in_bulk = sorted({c.tool for t in generate_tasks(spec, tools, seed) if t.family in BULK for c in t.oracle} & steps)
    assert in_bulk, "the premise: the example's bulk tasks take workflow steps"
    flagged = set(in_bulk)
    tables = [t.model_copy(update={"workflow": t.workflow.model_copy(update={"transitions": [
        tr.model_copy(update={"bulk": tr.name not in flagged}) for tr in t.workflow.transitions]})})
        if t.workflow else t for t in spec.tables]
    tasks = generate_tasks(spec.model_copy(update={"tables": tables}), tools, seed)
    assert len(tasks) >= 100
    assert not {c.tool for t in tasks if t.family in BULK for c in t.oracle} & flagged
    assert {c.tool for t in tasks if t.family not in BULK for c in t.oracle} & flagged  # one record at a time
    # the flag is written in a pack as `bulk: false`, and left out of spec.json where it is not
    tr = Transition.model_validate({"name": "write_off", "from": ["open"], "to": "void", "verb": "void {obj}",
                                    "bulk": False})
    assert not tr.bulk and tr.model_dump()["bulk"] is False
    assert "bulk" not in tr.model_copy(update={"bulk": True}).model_dump()


PLANTED = "planted fault: bundle_complete fails"


def _failing_proof(ctx: BuildContext) -> dict[str, int | float | str]:
    raise StageError(f"{ctx.world_id}: {PLANTED}")


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_rebuild_over_a_published_world_says_so_in_build_and_in_the_catalog(
        tmp_path: Path, small_templates: Path, small_data: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from worldfactory.cli import main

    wid = SMALL[0]
    data = tmp_path / "data"
    shutil.copytree(small_data, data, ignore=shutil.ignore_patterns(".built-*", "build"))
    bundle = data / "worlds" / wid
    before = _digests(bundle)
    failed = data / "catalog" / "failed_builds" / f"world_id={wid}"
    assert not failed.exists()
    stages = (*STAGES[:-1], dataclasses.replace(STAGES[-1], prove=_failing_proof, confined=()))
    monkeypatch.setattr(worldfactory.stages.pipeline, "STAGES", stages)
    monkeypatch.setenv("WORLDFACTORY_TEMPLATES", str(small_templates))
    assert main(["build", wid, "--no-dagster", "--jobs", "1", "--force", "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert f"error: {wid} was not built" in err and PLANTED in err
    assert f"error: {wid}: the last build FAILED; the bundle published before stays in {bundle}" in " ".join(
        err.split())
    assert _digests(bundle) == before  # the old bundle stays published, byte for byte
    [row] = pq.ParquetFile(failed / "part-0.parquet").read().to_pylist()
    assert row["stage"] == "world_bundle" and row["check_name"] == STAGES[-1].check and PLANTED in row["reason"]
    assert row["kept_world_json_sha256"] == before["world.json"]
    # a build that publishes clears the mark
    monkeypatch.setattr(worldfactory.stages.pipeline, "STAGES", STAGES)
    build_world(wid, data, templates=load_templates(small_templates), force=True)
    assert not failed.exists()
    with pytest.raises(StageFailed, match=PLANTED):  # the engine's own call fails the same way, and marks it
        monkeypatch.setattr(worldfactory.stages.pipeline, "STAGES", stages)
        build_world(wid, data, templates=load_templates(small_templates), force=True)
    assert failed.exists()


CLOCK_BLOCKED = {  # steps that no seeded row let the clock take before the packs held recent rows for them
    "clinic-scheduling-billing": ["mark_appointment_no_show"], "hotel-operations": ["mark_no_show"],
    "loan-origination": ["expire_rate_lock"], "restaurant-group": ["complete_event", "mark_no_show"],
}


def test_the_steps_the_clock_blocked_now_have_rows_to_take(tmp_path: Path) -> None:
    """Each pack seeds rows the clock lets these steps take (a scheduled visit of the last days, a run-out rate
    lock), so check-pack notes none of them; planted: the clinic without its recent scheduled visits is noted
    again, with the clock's reason."""
    root = _templates(tmp_path)
    run = _check_pack(*(str(root / "domains" / f"{p}.yaml") for p in CLOCK_BLOCKED))
    assert run.returncode == 0, run.stdout + run.stderr
    for pack, steps in CLOCK_BLOCKED.items():
        for step in steps:
            assert not [x for x in run.stdout.splitlines() if f"{pack}.yaml" in x and f":{step}]" in x], run.stdout
    assert "clock forbids" not in run.stdout
    clinic = root / "domains" / "clinic-scheduling-billing.yaml"
    text = clinic.read_text()
    line = next(x for x in text.splitlines(keepends=True) if "WHERE status = 'scheduled' AND id % 4 = 0" in x)
    clinic.write_text(text.replace(line, ""))
    run = _check_pack(str(clinic))
    assert ("uses mark_appointment_no_show: the clock forbids it on all" in run.stdout
            and "has not passed" in run.stdout), run.stdout

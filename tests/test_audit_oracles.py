"""The realism audit over the end state of every oracle plan (issue 31 criterion 3): made by the same replay
the tasks stage accepts a candidate with (worldfactory/generate/gold.py), blocking in the tasks proof, and
recorded in world.json and the catalog's `worlds` table."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import date, timedelta
from pathlib import Path

import pytest

from worldfactory.audit import audit_db
from worldfactory.generate.gold import run_oracle
from worldfactory.runtime.diff import CHANGES_TABLE
from worldfactory.runtime.world import World
from worldfactory.spec import Task
from worldfactory.stages.core import BuildContext, WorkDir, run_make, run_prove
from worldfactory.stages.tasks import STAGE as TASKS
from worldfactory.templates import load_templates

WORLD = "insurance-claims.regional--v001"


def _local(work: WorkDir) -> World:
    """The work folder's world, its episodes here (not in the confined worker), to read their end states."""
    return World({n: work.read(n, TASKS.name) for n in (*TASKS.reads, *TASKS.writes)})


def _meeting_task(world: World) -> tuple[Task, int]:
    """A task whose oracle marks a meeting held (complete_meeting), and the meeting's id."""
    for task in sorted(world.tasks.values(), key=lambda t: t.task_id):
        for call in task.oracle:
            if call.tool == "complete_meeting":
                return task, int(call.args["meeting_id"])
    raise AssertionError("the insurance example has no task that completes a meeting")


def _folder(worlds_dir: Path, tmp_path: Path) -> tuple[WorkDir, BuildContext]:
    """The tasks stage's files of the insurance example in a work folder, to plant faults in."""
    work = WorkDir(tmp_path / "work", WORLD)
    for name in (*TASKS.reads, *TASKS.writes):
        work.write(name, (worlds_dir / WORLD / name).read_bytes())
    # the templates' words, as the build had them: a remade tasks stage draws the build's candidates in its order
    return work, BuildContext(world_id=WORLD, templates=None, work=work, data_root=tmp_path,  # type: ignore[arg-type]
                              vocabulary=load_templates().vocabulary)


def _completes(work: WorkDir, meeting: int) -> list[str]:
    """The tasks of the work folder whose oracle marks the meeting held."""
    tasks = [json.loads(line) for line in work.read("tasks.jsonl", TASKS.name).decode().splitlines()]
    return [t["task_id"] for t in tasks for c in t["oracle"]
            if c["tool"] == "complete_meeting" and int(c["args"]["meeting_id"]) == meeting]


@pytest.fixture
def planted(worlds_dir: Path, tmp_path: Path) -> tuple[WorkDir, BuildContext, Task, int, str]:
    """The insurance example's work folder (_folder), the seed changed so that the meeting a task marks held is
    dated nine days ahead: a plan ahead is fine in the seed (not yet held), but the task's end state says it
    was held in the future."""
    work, ctx = _folder(worlds_dir, tmp_path)
    task, meeting = _meeting_task(World.open(worlds_dir / WORLD))
    clock = date.fromisoformat(json.loads(work.read("brief.json", TASKS.name))["clock"])
    ahead = (clock + timedelta(days=9)).isoformat()
    seed = tmp_path / "seed.db"
    seed.write_bytes(work.read("seed.db", TASKS.name))
    with sqlite3.connect(seed) as conn:
        conn.execute("UPDATE calendar_events SET starts_on = ? WHERE id = ?", (ahead, meeting))
    conn.close()
    work.write("seed.db", seed.read_bytes())
    return work, ctx, task, meeting, ahead


def test_the_examples_oracle_end_states_pass_and_are_recorded(worlds_dir: Path) -> None:
    """As built: every served task's end state passes, the proof says how many rows it checked, world.json and
    the catalog row carry both counts."""
    import pyarrow.parquet as pq

    manifest = json.loads((worlds_dir / WORLD / "world.json").read_text())
    audit = manifest["audit"]
    assert audit["seed_violations"] == 0 and audit["oracle_end_violations"] == 0
    assert audit["seed_checked_rows"] > 500 and audit["oracle_end_checked_rows"] > 100
    rows = pq.read_table(worlds_dir.parent / "catalog" / "worlds" / f"world_id={WORLD}").to_pylist()
    assert [(r["audit_seed_violations"], r["audit_oracle_violations"]) for r in rows] == [(0, 0)]


def test_a_violation_in_an_oracle_end_state_fails_the_tasks_proof(planted: tuple) -> None:
    """Run as the build runs it (confined, the blocking check `oracles_run`): the proof fails naming the task,
    the rule, the table and the row."""
    work, ctx, task, meeting, ahead = planted
    proof = run_prove(TASKS, ctx)
    assert not proof.passed
    assert re.search(rf"realism audit of the oracles' end states: 1 violations, first: task {task.task_id}: "
                     rf"done_but_ahead: calendar_events row {meeting}: status 'completed' but starts_on {ahead} is "
                     rf"after today", proof.reason), proof.reason


def test_the_tasks_stage_refuses_a_candidate_whose_end_state_breaks_the_clock(planted: tuple) -> None:
    """The outcome the stage accepts candidates by carries the end state's audit: the planted task's names the
    meeting. The tasks stage, run on the planted folder, refuses at least that candidate and serves no task
    that marks the meeting held; the same meeting is completed by a task over the seed as built."""
    work, ctx, task, meeting, _ = planted
    world = _local(work)
    assert run_oracle(world, task).audit is None  # the verifiers' runs need no audit
    outcome = run_oracle(world, task, audit=True)
    assert not outcome.failure and outcome.audit is not None
    assert [(v.rule, v.table, v.row, v.column) for v in outcome.audit.violations] == [
        ("done_but_ahead", "calendar_events", meeting, "starts_on")]
    assert task.task_id in _completes(work, meeting)  # as built
    report = run_make(TASKS, ctx)
    # kept out by the clock gate (generate/tasks/clock.py) where the draw sees it, else refused by the end
    # state's audit (which test_an_oracle_end_state_that_breaks_an_invariant_is_caught_and_refused plants)
    assert report.counts["tasks"] >= 100, report.counts
    assert _completes(work, meeting) == []
    assert run_prove(TASKS, ctx).passed


@pytest.fixture
def invariant_planted(worlds_dir: Path, tmp_path: Path) -> tuple[WorkDir, BuildContext, Task, int, str]:
    """The insurance example's work folder, its spec given an invariant that holds on the seed only: the meeting
    a task marks held is never held. The pack's seed keeps it; that task's end state breaks it."""
    work, ctx = _folder(worlds_dir, tmp_path)
    task, meeting = _meeting_task(World.open(worlds_dir / WORLD))
    name = "the planted meeting is never held"
    spec = json.loads(work.read("spec.json", TASKS.name))
    spec["invariants"].append({"name": name, "source": "domains/insurance-claims.yaml: field 'invariants[9].sql'",
                               "sql": f"SELECT count(*) FROM calendar_events e WHERE e.status = 'completed' "
                                      f"AND e.id = {meeting}"})
    work.write("spec.json", json.dumps(spec).encode())
    return work, ctx, task, meeting, name


def test_an_oracle_end_state_that_breaks_an_invariant_is_caught_and_refused(invariant_planted: tuple) -> None:
    """The end-state audit runs the pack's invariants over what the plan changed: the planted task's names the
    invariant, its table and its first offending row; the tasks proof fails naming the task and the invariant;
    the tasks stage refuses the candidate and serves no task that holds the meeting."""
    work, ctx, task, meeting, name = invariant_planted
    outcome = run_oracle(_local(work), task, audit=True)
    assert not outcome.failure and outcome.audit is not None
    assert [(v.rule, v.table, v.row, v.column) for v in outcome.audit.violations] == [
        ("invariant", "calendar_events", meeting, "")]
    assert outcome.audit.violations[0].detail.startswith(f"invariant '{name}' fails for 1 rows")
    proof = run_prove(TASKS, ctx)
    assert not proof.passed
    assert re.search(rf"realism audit of the oracles' end states: 1 violations, first: task {task.task_id}: "
                     rf"invariant: calendar_events row {meeting}: invariant '{name}' fails for 1 rows",
                     proof.reason), proof.reason
    assert task.task_id in _completes(work, meeting)
    report = run_make(TASKS, ctx)
    assert report.counts["audit_refused"] >= 1, report.counts
    assert _completes(work, meeting) == []
    assert run_prove(TASKS, ctx).passed


def test_the_audit_of_changed_rows_finds_what_the_full_audit_finds(planted: tuple) -> None:
    """The end-state audit checks only what the plan's writes can break; over every task of the planted world it
    finds exactly the full audit's violations, at a fraction of the rows."""
    work, ctx, task, meeting, _ = planted
    world = _local(work)
    some = 0
    for t in sorted(world.tasks.values(), key=lambda t: t.task_id)[:60] + [task]:
        with world.episode(t.task_id) as ep:
            for call in t.oracle:
                if call.tool != "ask_requester":
                    ep.call(call.tool, call.args)
            changed: dict[str, set[int]] = {}
            for table, key in ep.conn.execute(f"SELECT tbl, id FROM {CHANGES_TABLE}"):
                changed.setdefault(table, set()).add(key)
            part, full = audit_db(world.spec, ep.conn, changed), audit_db(world.spec, ep.conn)
        assert part.violations == full.violations, t.task_id
        assert part.checked_rows < full.checked_rows
        some += bool(part.violations)
    assert some >= 1  # the planted task, at least


def test_the_docs_catalog_tables_are_the_summary_scripts(worlds_dir: Path, tmp_path: Path) -> None:
    """docs/catalogs.md's summary and per-pack tables have exactly the columns bench/catalog_summary.py gives
    (the audit counts among them), and its --docs mode rewrites both in place from a catalog: over the three
    examples, one row per pack, every audit count 0. Planted: a doc without the per-pack table is refused."""
    import importlib.util

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("catalog_summary", ROOT / "bench" / "catalog_summary.py")
    assert spec is not None and spec.loader is not None
    summary_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary_mod)
    from worldfactory.catalog import query

    root = worlds_dir.parent
    summary = summary_mod.table(*query(root, summary_mod.SUMMARY))
    per_pack = summary_mod.table(*query(root, summary_mod.PER_PACK))
    doc = (ROOT / "docs" / "catalogs.md").read_text()
    for new in (summary, per_pack):
        header = new.split("\n")[0]
        assert header in doc.split("\n"), header
    assert "audit seed violations | audit oracle violations" in summary.split("\n")[0]
    assert "audit seed | audit oracle ends" in per_pack.split("\n")[0]
    rows = per_pack.split("\n")[2:]
    assert len(rows) == 3 and all(r.endswith("| 0 | 0 |") for r in rows), rows
    rewritten = summary_mod.rewrite_docs(doc, summary, per_pack)
    assert summary in rewritten and per_pack in rewritten and rewritten.count("\n| pack | worlds |") == 1
    assert rewritten.split("## The catalog at scale")[0] == doc.split("## The catalog at scale")[0]
    with pytest.raises(ValueError, match=r"no table whose header begins '\| pack \|'"):
        summary_mod.rewrite_docs(doc.replace("| pack |", "| domain |"), summary, per_pack)

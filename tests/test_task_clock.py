"""Tasks are drawn only where the world's clock allows the action they ask for (issue 31): a planted
clock-forbidden step (a meeting held next month marked as held, a visit not yet due marked a no-show, a
booking in the past confirmed) is refused, and a guard may compare a date with `$today`."""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import date, timedelta
from pathlib import Path

import pytest

from worldfactory.generate.tasks import generate_tasks, lookup_act
from worldfactory.generate.tasks.builder import TaskBuilder
from worldfactory.generate.tasks.clock import clock_refusal
from worldfactory.generate.workflow import guards_hold
from worldfactory.packs import check_files
from worldfactory.spec import Guard, TableDef, Transition, WorldSpec

WORLD = "insurance-claims.regional--v001"
ROOT = Path(__file__).resolve().parent.parent
TODAY = "2026-05-30"
VISITS = TableDef.model_validate({
    "name": "visits", "singular": "visit", "rows": 1, "columns": [
        {"name": "scheduled_on", "type": "date", "date_meaning": "plan"},
        {"name": "due_on", "type": "date", "date_meaning": "period"},
        {"name": "opened_on", "type": "date", "date_meaning": "event"},
        {"name": "status", "enum": ["booked", "scheduled", "completed", "no_show", "overdue", "worked"]}]})


def _tr(to: str, **extra: object) -> Transition:
    return Transition.model_validate({"name": f"to_{to}", "from": ["booked"], "to": to, "verb": "x {obj}", **extra})


def test_the_clock_refuses_each_kind_of_step_it_forbids() -> None:
    ahead, past = "2026-07-01", "2026-04-01"
    row = {"id": 1, "scheduled_on": ahead, "due_on": ahead, "opened_on": past, "status": "booked"}
    assert clock_refusal(VISITS, _tr("completed"), row, {}, TODAY)[0] == "done_ahead"
    assert clock_refusal(VISITS, _tr("worked"), row, {}, TODAY)[0] == "done_ahead"  # hours of a shift ahead
    assert clock_refusal(VISITS, _tr("no_show"), row, {}, TODAY)[0] == "lapse_early"
    assert clock_refusal(VISITS, _tr("overdue"), {**row, "scheduled_on": past}, {}, TODAY)[0] == "lapse_early"
    assert clock_refusal(VISITS, _tr("scheduled"), {**row, "scheduled_on": past}, {}, TODAY)[0] == "schedule_past"
    moved = _tr("booked", params=[{"name": "on", "type": "date", "task_value": "row.scheduled_on"}],
                set={"scheduled_on": "$on"})
    assert clock_refusal(VISITS, moved, row, {"on": past}, TODAY)[0] == "param_past"
    # what the clock allows: held when its day has come, a no-show or overdue once its day has passed
    done = {**row, "scheduled_on": past, "due_on": past}
    for to in ("completed", "worked", "no_show", "overdue"):
        assert clock_refusal(VISITS, _tr(to), done, {}, TODAY) is None
    assert clock_refusal(VISITS, _tr("scheduled"), row, {}, TODAY) is None
    assert clock_refusal(VISITS, moved, row, {"on": ahead}, TODAY) is None


@pytest.fixture
def bundle(worlds_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / WORLD
    shutil.copytree(worlds_dir / WORLD, out)
    return out


def _builder(bundle: Path) -> TaskBuilder:
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    tools = {t["name"] for t in json.loads((bundle / "tools.json").read_text())}
    return TaskBuilder(spec, tools, (bundle / "seed.db").read_bytes())


def _meeting_task(b: TaskBuilder, row_id: int) -> tuple[bool, list[str]]:
    """Plan 'mark meeting N as held' as lookup_act does, and offer it: whether it was added."""
    table = b.spec.table("calendar_events")
    tr = next(t for t in table.workflow.transitions if t.name == "complete_meeting")  # type: ignore[union-attr]
    row = b.row(table, row_id)
    plan = None
    while plan is None:  # the address is drawn from the stream: try until one is made
        plan = lookup_act.plan(b, ("transition", table, tr, row, {}))
    return b.add("lookup_act", plan.instruction, plan.oracle, plan.target), [c.tool for c in plan.oracle]


def test_a_planted_clock_forbidden_task_is_not_drawn(bundle: Path) -> None:
    today = date.fromisoformat(json.loads((bundle / "spec.json").read_text())["brief"]["clock"])
    with sqlite3.connect(bundle / "seed.db") as conn:
        row_id = conn.execute("SELECT min(id) FROM calendar_events WHERE status = 'scheduled'").fetchone()[0]
        conn.execute("UPDATE calendar_events SET starts_on = ? WHERE id = ?", ((today - timedelta(days=3)).isoformat(),
                                                                               row_id))
    b = _builder(bundle)
    added, tools = _meeting_task(b, row_id)
    assert added and "complete_meeting" in tools  # the premise: held three days ago, it may be marked held
    with sqlite3.connect(bundle / "seed.db") as conn:  # planted: the meeting is next month
        conn.execute("UPDATE calendar_events SET starts_on = ? WHERE status = 'scheduled'",
                     ((today + timedelta(days=30)).isoformat(),))
    b = _builder(bundle)
    added, _ = _meeting_task(b, row_id)
    assert not added and b.clock_refused_tasks == {"done_ahead": 1}
    assert b.clock_refusals[("complete_meeting", row_id)] == "done_ahead"
    # the whole world's tasks over the planted seed: no task marks a meeting of next month as held
    clock: dict[str, int] = {}
    spec, seed = b.spec, (bundle / "seed.db").read_bytes()
    tasks = generate_tasks(spec, b.tools, seed, clock=clock)
    assert len(tasks) >= 100
    scheduled = {r[0] for r in sqlite3.connect(bundle / "seed.db").execute(
        "SELECT id FROM calendar_events WHERE status = 'scheduled'")}
    held = [t.task_id for t in tasks for c in t.oracle
            if c.tool == "complete_meeting" and c.args.get("calendar_event_id") in scheduled]
    assert held == [] and clock["done_ahead"] >= 1, clock  # refused: drawn, then kept out


def test_a_guard_may_compare_a_date_with_today(tmp_path: Path) -> None:
    tr = _tr("overdue", guards=[{"field": "row.due_on", "op": "<", "value": "$today", "message": "not due yet"}])
    assert guards_hold(tr, {"due_on": "2026-05-01"}, {}, {}, TODAY)
    assert not guards_hold(tr, {"due_on": "2026-06-01"}, {}, {}, TODAY)
    assert not guards_hold(tr, {"due_on": "2026-05-01"}, {}, {})  # no clock: never taken for granted
    assert Guard(field="row.due_on", op="<", value="$today", message="m").value == "$today"
    # check-pack takes $today on a date column and names the field where it is not one
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    pack = root / "domains" / "insurance-claims.yaml"
    text = pack.read_text()
    anchor = "        - name: close_claim\n"
    assert text.count(anchor) == 1
    guard = ("          guards: [{{field: row.{f}, op: '<', value: $today, message: not yet}}]\n")
    pack.write_text(text.replace(anchor, anchor + guard.format(f="filed_on")))
    assert check_files([pack]) == []
    pack.write_text(text.replace(anchor, anchor + guard.format(f="amount_claimed")))
    [line] = check_files([pack])
    assert ".transitions[" in line and ":close_claim].guards[0].value': '$today' compares with a date column" in line

"""Issue 31, records still waiting long after their start: a payroll run not yet paid is the current cycle (its
pay date today or ahead, moved by the pack's derive and declared by a `past` constraint with `fit: derive`),
and HR time off whose first day has passed is decided (the draw moves the status and draws a denial's note).
Each is caught by the realism audit with table, row and rule when planted; without the pack's fix it breaks."""

from __future__ import annotations

import random
import sqlite3

import pytest

from worldfactory.audit import audit_image
from worldfactory.briefs import expand_world
from worldfactory.constraints import Fitter
from worldfactory.generate.data import SeedDataError, build_seed_db, check_seed
from worldfactory.generate.schema import build_spec
from worldfactory.spec import PastC, WorldSpec
from worldfactory.templates import load_templates

PAYROLL = "payroll.regional--v001"
UNPAID = ("open", "calculated", "pending_approval", "controller_review", "approved")
MOVE_PAY_DATE = "UPDATE pay_runs SET pay_date = CASE"


def _seed(world_id: str, drop: str | None = None, fit: str | None = None) -> tuple[WorldSpec, bytes]:
    ts = load_templates()
    spec = build_spec(expand_world(world_id, ts), ts)
    if drop:
        kept = [d for d in spec.derive if drop not in d]
        assert len(kept) == len(spec.derive) - 1
        spec = spec.model_copy(update={"derive": kept})
    if fit:  # the past constraints as the draw would fit them without the pack's choice
        for t in spec.tables:
            t.constraints = [c.model_copy(update={"fit": fit}) if isinstance(c, PastC) else c for c in t.constraints]
    return spec, build_seed_db(spec, ts.vocabulary)


def _conn(image: bytes) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.deserialize(image)
    return conn


def _broken(spec: WorldSpec, image: bytes) -> set[tuple[str, int, str]]:
    return {(v.table, v.row, v.column) for v in audit_image(spec, image).violations if v.rule == "past"}


def test_a_pay_run_not_yet_paid_is_the_current_cycle() -> None:
    spec, image = _seed(PAYROLL)
    assert audit_image(spec, image).violations == []
    conn = _conn(image)
    today = spec.brief.clock
    marks = ", ".join("?" * len(UNPAID))
    unpaid = conn.execute(f"SELECT status, pay_date, period_end, approved_on FROM pay_runs WHERE status IN ({marks})",
                          UNPAID).fetchall()
    assert len({s for s, *_ in unpaid}) == len(UNPAID)  # every stage of a run is still there for tasks
    for status, pay_date, period_end, approved_on in unpaid:
        assert pay_date >= today and period_end < pay_date, (status, pay_date, period_end)
        assert (pay_date == today and period_end <= approved_on <= today) if status == "approved" else True
    # a paycheck is issued only from an approved run: the approved runs still have pending paychecks
    assert conn.execute("SELECT count(*) FROM paychecks c JOIN pay_runs r ON r.id = c.pay_run_id "
                        "WHERE r.status = 'approved' AND c.status = 'pending'").fetchone()[0] > 0
    assert conn.execute("SELECT count(*) FROM pay_runs WHERE status = 'paid' AND pay_date > ?",
                        (today,)).fetchone()[0] == 0
    # without the derive that moves their dates, the runs not yet paid are a year stale and the audit says so
    spec_b, image_b = _seed(PAYROLL, drop=MOVE_PAY_DATE)
    broken = _broken(spec_b, image_b)
    assert len(broken) > 5 and {(t, c) for t, _, c in broken} == {("pay_runs", "status")}
    # fitted by status instead, the draw would pay nearly every run: the pack keeps them as drawn
    _, image_s = _seed(PAYROLL, fit="status")
    drawn = _conn(image_s).execute(f"SELECT count(*) FROM pay_runs WHERE status IN ({marks})", UNPAID).fetchone()[0]
    assert drawn < len(unpaid) / 2
    # planted: an approved run of a year ago, still waiting to be paid (as PR-0014 was)
    rid = conn.execute("SELECT id FROM pay_runs WHERE status = 'approved' ORDER BY id LIMIT 1").fetchone()[0]
    conn.execute("UPDATE pay_runs SET pay_date = date(pay_date, '-1 year'), period_start = date(period_start, "
                 "'-1 year'), period_end = date(period_end, '-1 year'), approved_on = date(approved_on, '-1 year') "
                 "WHERE id = ?", (rid,))
    planted = conn.serialize()
    assert _broken(spec, planted) == {("pay_runs", rid, "status")}
    with pytest.raises(SeedDataError, match=rf"past: pay_runs row {rid}: status 'approved' but pay_date"):
        check_seed(spec, planted)


def test_time_off_whose_first_day_has_passed_is_decided() -> None:
    spec, image = _seed(PAYROLL)
    conn = _conn(image)
    today = spec.brief.clock
    assert conn.execute("SELECT count(*) FROM time_off_requests WHERE status IN ('requested', 'referred_to_hr') "
                        "AND starts_on < ?", (today,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM time_off_requests WHERE status = 'requested'").fetchone()[0] > 0
    # a denial the clock brings has its note (the module's invariant): the status is fitted as it is drawn
    assert conn.execute("SELECT count(*) FROM time_off_requests WHERE status = 'denied'").fetchone()[0] > 0
    assert conn.execute("SELECT count(*) FROM time_off_requests WHERE status = 'denied' "
                        "AND decision_note IS NULL").fetchone()[0] == 0
    # planted: a request still waiting whose leave began last month
    rid = conn.execute("SELECT id FROM time_off_requests WHERE status = 'requested' ORDER BY id LIMIT 1").fetchone()[0]
    conn.execute("UPDATE time_off_requests SET starts_on = date(?, '-30 days') WHERE id = ?", (today, rid))
    assert _broken(spec, conn.serialize()) == {("time_off_requests", rid, "status")}


def test_fit_derive_leaves_the_draw_and_fit_status_moves_it() -> None:
    ts = load_templates()
    spec = build_spec(expand_world(PAYROLL, ts), ts)
    runs, leave = spec.table("pay_runs"), spec.table("time_off_requests")
    got = set()
    for seed in range(30):
        run = {"pay_date": "2020-01-01", "status": "approved", "approved_on": "2019-12-30"}
        Fitter(spec, random.Random(seed), {}).fit_clock(runs, run)
        assert run["status"] == "approved"
        req = {"starts_on": "2020-01-01", "status": "referred_to_hr", "working_days": 3}
        Fitter(spec, random.Random(seed), {}).fit_clock(leave, req)
        got.add(req["status"])
    assert got == {"approved", "denied", "cancelled"}
    # the default is left out of spec.json, so worlds that predate `fit` keep their bytes
    past = next(c for c in leave.constraints
                if isinstance(c, PastC))
    assert "fit" not in past.model_dump() and runs.constraints[-1].model_dump()["fit"] == "derive"


# pack, table, the statuses still waiting, its date, the derive that moves their dates (left out: the fault)
MOVED = [
    ("accounts-payable.regional--v001", "payment_batches", ("draft", "submitted", "cfo_review", "approved"),
     "scheduled_for", "UPDATE payment_batches SET scheduled_for"),
    ("it-service-desk.regional--v001", "change_requests", ("draft", "submitted", "cab_review"), "planned_start",
     "UPDATE change_requests SET planned_start"),
    ("utilities-field-service.regional--v001", "work_orders", ("created", "awaiting_approval", "scheduled"),
     "scheduled_on", "UPDATE work_orders SET scheduled_on"),
    ("procurement.regional--v001", "contracts", ("draft", "legal_review"), "starts_on",
     "UPDATE contracts SET starts_on"),
    # its records date from the bid (bid_on, the origin), so moving the start ahead leaves none before it
    ("construction-projects.regional--v001", "projects", ("bidding", "surety_review", "preconstruction"),
     "start_date", "UPDATE projects SET start_date"),
]


@pytest.mark.parametrize(("world", "table", "waiting", "col", "derive"), MOVED, ids=[m[0].split(".")[0] for m in MOVED])
def test_work_still_waiting_is_dated_ahead(world: str, table: str, waiting: tuple[str, ...], col: str,
                                           derive: str) -> None:
    spec, image = _seed(world)
    assert audit_image(spec, image).violations == []
    marks = ", ".join("?" * len(waiting))
    sql = f"SELECT count(*) FROM {table} WHERE status IN ({marks}) AND {col} < ?"
    conn = _conn(image)
    assert conn.execute(sql, (*waiting, spec.brief.clock)).fetchone()[0] == 0
    assert conn.execute(f"SELECT count(*) FROM {table} WHERE status IN ({marks})", waiting).fetchone()[0] > 0
    spec_b, image_b = _seed(world, drop=derive)
    broken = _broken(spec_b, image_b)
    assert broken and {(t, c) for t, _, c in broken} == {(table, "status")}

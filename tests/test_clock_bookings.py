"""Issue 31, bookings true to their clock: a stay still `requested` after its check-in (travel-agency) and a
group's reservation arriving outside its block's dates (hotel-operations) are caught by the realism audit with
table, row and rule; the packs' derive, which moves dates after the draw, leaves neither; a band bounds a date
by its parent's period; derive reads the clock as today(), invariants do not."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.test_constraints import ROOT
from worldfactory.audit import audit_image
from worldfactory.briefs import expand_world
from worldfactory.constraints import Fitter
from worldfactory.generate.data import SeedDataError, build_seed_db, check_seed
from worldfactory.generate.schema import build_spec
from worldfactory.packs import check_files
from worldfactory.spec import WorldSpec
from worldfactory.templates import load_templates

TRAVEL = "travel-agency.regional--v001"
HOTEL = "hotel-operations.startup--v001"
# the derive statements that make the final rows keep the new constraints (the planted fault drops them)
STAY_STATUS = "UPDATE hotel_stays SET status = CASE"
BLOCK_LINK = ("SET group_block_id = (SELECT", "SET arrival_date = (SELECT max(b.arrival_date")


def _seed(world_id: str, drop: tuple[str, ...] = ()) -> tuple[WorldSpec, bytes]:
    ts = load_templates()
    spec = build_spec(expand_world(world_id, ts), ts)
    if drop:
        kept = [d for d in spec.derive if not any(x in d for x in drop)]
        assert len(kept) == len(spec.derive) - len(drop)
        spec = spec.model_copy(update={"derive": kept})
    return spec, build_seed_db(spec, ts.vocabulary)


def _conn(image: bytes) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)  # autocommit: a planted write is in serialize()
    conn.deserialize(image)
    return conn


def _broken(spec: WorldSpec, image: bytes, rule: str) -> set[tuple[str, int, str]]:
    return {(v.table, v.row, v.column) for v in audit_image(spec, image).violations if v.rule == rule}


def test_no_stay_is_still_requested_after_its_check_in() -> None:
    """The derive moves check-in to the trip's departure after the draw; without the status that follows it,
    requested stays of trips that are over break the `past` constraint (the audit reads the final rows)."""
    spec, image = _seed(TRAVEL)
    assert audit_image(spec, image).violations == []
    conn = _conn(image)
    clock = spec.brief.clock
    assert conn.execute("SELECT count(*) FROM hotel_stays WHERE status = 'requested' AND check_in_date < ?",
                        (clock,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM hotel_stays WHERE status = 'requested'").fetchone()[0] > 0
    spec_b, image_b = _seed(TRAVEL, (STAY_STATUS,))
    broken = _broken(spec_b, image_b, "past")
    assert broken and {(t, c) for t, _, c in broken} == {("hotel_stays", "status")}
    # planted in the kept seed: a stay to come, requested, whose check-in is moved to last month
    rid = conn.execute("SELECT id FROM hotel_stays WHERE status = 'requested' ORDER BY id LIMIT 1").fetchone()[0]
    conn.execute("UPDATE hotel_stays SET check_in_date = date(?, '-30 days') WHERE id = ?", (clock, rid))
    planted = conn.serialize()
    assert _broken(spec, planted, "past") == {("hotel_stays", rid, "status")}
    with pytest.raises(SeedDataError, match=rf"past: hotel_stays row {rid}: status 'requested' but check_in_date"):
        check_seed(spec, planted)


def test_a_groups_reservation_arrives_within_its_blocks_dates() -> None:
    spec, image = _seed(HOTEL)
    assert audit_image(spec, image).violations == []
    conn = _conn(image)
    outside = ("SELECT count(*) FROM reservations r JOIN group_blocks b ON b.id = r.group_block_id "
               "WHERE r.arrival_date < b.arrival_date OR r.arrival_date >= b.departure_date")
    assert conn.execute(outside).fetchone()[0] == 0
    linked = conn.execute("SELECT count(*), sum(channel <> 'group') FROM reservations "
                          "WHERE group_block_id IS NOT NULL").fetchone()
    assert linked[0] >= 3 and linked[1] == 0
    # the derive moves arrivals with their status after the draw: without linking them again, they leave
    spec_b, image_b = _seed(HOTEL, BLOCK_LINK)
    assert _broken(spec_b, image_b, "band")
    # planted: a reservation of a block arriving a month after the block departed
    rid, block = conn.execute("SELECT id, group_block_id FROM reservations WHERE group_block_id IS NOT NULL "
                              "ORDER BY id LIMIT 1").fetchone()
    conn.execute("UPDATE reservations SET arrival_date = (SELECT date(departure_date, '+30 days') FROM group_blocks "
                 "WHERE id = ?) WHERE id = ?", (block, rid))
    planted = conn.serialize()
    found = [v for v in audit_image(spec, planted).violations if v.rule == "band"]
    assert [(v.table, v.row, v.column) for v in found] == [("reservations", rid, "arrival_date")]
    assert f"outside group_blocks {block}'s band" in found[0].detail
    assert "(arrival_date..departure_date)" in found[0].detail


def test_a_date_band_draws_the_date_within_the_parents_period() -> None:
    ts = load_templates()
    spec = build_spec(expand_world(HOTEL, ts), ts)
    table = spec.table("reservations")
    block = {"id": 1, "arrival_date": "2026-10-05", "departure_date": "2026-10-09"}
    fitter = Fitter(spec, random.Random(7), {"group_blocks": [block]})
    drawn = [{"group_block_id": 1, "arrival_date": "2026-01-20", "status": "confirmed"} for _ in range(20)]
    for row in drawn:
        fitter.fit_row(table, row)
    got = {row["arrival_date"] for row in drawn}
    assert got <= {f"2026-10-0{d}" for d in range(5, 10)} and len(got) > 1
    kept = {"group_block_id": 1, "arrival_date": "2026-10-06", "status": "confirmed"}
    fitter.fit_row(table, kept)
    assert kept["arrival_date"] == "2026-10-06"
    alone = {"group_block_id": None, "arrival_date": "2026-01-20", "status": "confirmed"}
    fitter.fit_row(table, alone)
    assert alone["arrival_date"] == "2026-01-20"


def test_derive_reads_the_clock_and_an_invariant_does_not(tmp_path: Path) -> None:
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    path = root / "domains" / "insurance-claims.yaml"
    text = path.read_text()
    assert "\nderive:" not in text and text.count("\ninvariants:\n") == 1
    path.write_text(text.replace(
        "\ninvariants:\n", "\nderive:\n  - \"UPDATE claims SET filed_on = min(filed_on, today())\"\ninvariants:\n"
        "  - {name: nothing filed ahead, sql: \"SELECT count(*) FROM claims WHERE filed_on > today()\"}\n"))
    lines = check_files([path], root)
    assert [x for x in lines if "derive[0]" in x] == [], lines
    assert any("field 'invariants[0].sql'" in x and "no such function: today" in x for x in lines), lines


def test_a_status_the_clock_moves_keeps_the_constraints_it_brings_into_force() -> None:
    """A resource booking still requested after its date is fitted to completed or declined; a completed one
    keeps the hours limit that only held for confirmed, in-use and completed bookings (fitted again)."""
    ts = load_templates()
    spec = build_spec(expand_world("clinic-scheduling-billing.regional--v001", ts), ts)
    table = spec.table("resource_bookings")
    cap = spec.brief.rules["max_booking_hours"]
    got = set()
    for seed in range(40):
        row = {"starts_on": "2020-01-01", "status": "requested", "duration_hours": cap * 10}
        Fitter(spec, random.Random(seed), {}).fit_clock(table, row)
        got.add(row["status"])
        assert row["status"] in ("completed", "declined")
        if row["status"] == "completed":
            assert row["duration_hours"] <= cap, row
    assert got == {"completed", "declined"}

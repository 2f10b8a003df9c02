"""Relative dates in `set` and effects (issue 31): `{date_after: <date>, days: <N or rule>}` writes a date
counted from the world's clock or a date of the row, in the generated tool, so an issued invoice is due in
30 days as seeded open invoices are; a bad declaration is refused at load with the file and field named."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory.packs import check_files
from worldfactory.runtime.toolkit import ToolDB, ToolError
from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

BILLING = "commerce-operations.startup--v001"
COLUMN = "      - {name: status, enum: [open, resolved, closed]"
REVIEW = ("      - {name: review_on, type: date, date_meaning: period, nullable: true, "
          "gen: {date_after: opened_on, days: [7, 14]}, when: {status: [resolved, closed]}}\n")
STEP = "          description: Resolve an open request.\n"


def _plus(day: str, days: int) -> str:
    return (date.fromisoformat(day) + timedelta(days=days)).isoformat()


def _pack(tmp_path: Path, review: str) -> Path:
    """The small help-desk pack whose resolve_request also sets review_on to `review`."""
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    assert COLUMN in text and STEP in text
    step = STEP + f"          set: {{review_on: {review}}}\n"
    pack.write_text(text.replace(COLUMN, REVIEW + COLUMN).replace(STEP, step))
    return root


def test_issuing_an_invoice_sets_its_due_date_from_the_clock(worlds: dict[str, World]) -> None:
    world = worlds[BILLING]
    assert "'due_on': db.days_after(db.today, 30)" in (world.path / "tools.py").read_text()
    with world.episode() as ep:
        drafts = ep.call("search_invoices", {"status": "draft"}).result
        assert drafts and drafts["results"]
        draft = drafts["results"][0]
        assert draft["due_on"] is None
        step = ep.call("issue_invoice", {"invoice_id": draft["id"]})
        assert step.ok, step.error
        issued = step.result["invoice"]
    assert issued["issued_on"] == world.clock
    assert issued["due_on"] == _plus(world.clock, 30)  # as every seeded open invoice: issued_on + 30


def test_a_date_counted_from_the_row_by_a_rule(tmp_path: Path) -> None:
    ts = load_templates(_pack(tmp_path, "{date_after: row.opened_on, days: credit_limit}"))
    build_world(SMALL[0], tmp_path / "out", ts)  # the tasks that resolve requests replay against the tool
    world = World.open(tmp_path / "out" / "worlds" / SMALL[0])
    days = int(world.brief.rules["credit_limit"])
    rows = world.seed_rows("requests")
    open_id = next(i for i, r in rows.items() if r[-1] == "open")
    with world.episode() as ep:
        step = ep.call("resolve_request", {"request_id": open_id})
    assert step.ok, step.error
    assert step.result["request"]["review_on"] == _plus(step.result["request"]["opened_on"], days)


def test_days_after_is_the_clock_s_and_refuses_a_missing_date() -> None:
    db = ToolDB(None, "2026-02-20")  # type: ignore[arg-type]
    assert db.days_after(db.today, 10) == "2026-03-02"
    assert db.days_after("2026-03-31", -31) == "2026-02-28"
    for bad in (None, "soon"):
        with pytest.raises(ToolError):
            db.days_after(bad, 30)


@pytest.mark.parametrize(("review", "field", "said"), [
    ("{date_after: row.fee, days: 10}", ".set.review_on.date_after", "no date column 'fee'"),
    ("{date_after: $when, days: 10}", ".set.review_on.date_after", "no date parameter 'when'"),
    ("{date_after: tomorrow, days: 10}", ".set.review_on.date_after", "a relative date is"),
    ("{date_after: $today, days: payment_terms}", ".set.review_on.days", "'payment_terms' is neither"),
    ("{date_after: $today, days: 30}", ".set.review_on.days", "outside the [7, 14] days"),
    ("{date_after: $today, days: 1.5}", ".set.review_on", "a relative date is"),
    ("{date_after: $today}", ".set.review_on", "a relative date is"),
    ("{later: 3}", ".set.review_on", "a written value is"),
])
def test_a_bad_relative_date_is_refused_naming_the_file_and_field(tmp_path: Path, review: str, field: str,
                                                                   said: str) -> None:
    lines = check_files([_pack(tmp_path, review) / "domains" / "help-desk.yaml"])
    assert any("help-desk.yaml" in line and f"resolve_request]{field}" in line and said in line
               for line in lines), lines


def test_a_create_tools_default_date_counts_from_the_clock(tmp_path: Path) -> None:
    """create_defaults take a relative date from $today (the tickets module: a new ticket is due in 3 days, as
    seeded ones are 1 to 5 days after they open); one counted from the new row's own dates is refused."""
    root = _pack(tmp_path, "{date_after: row.opened_on, days: 10}")
    pack = root / "domains" / "help-desk.yaml"
    defaults = "create_defaults: {opened_on: $today, status: open, credit: 0}"
    text = pack.read_text()
    assert defaults in text
    pack.write_text(text.replace(defaults, defaults[:-1] + ", review_on: {date_after: $today, days: 10}}"))
    ts = load_templates(root)
    build_world(SMALL[0], tmp_path / "out", ts)
    world = World.open(tmp_path / "out" / "worlds" / SMALL[0])
    with world.episode() as ep:
        account = ep.call("search_accounts", {}).result["results"][0]["id"]
        made = ep.call("create_request", {"reference": "REQ-NEW-1", "account_id": account, "fee": 10})
    assert made.ok, made.error
    assert made.result["request"]["review_on"] == _plus(world.clock, 10)
    pack.write_text(text.replace(defaults, defaults[:-1] + ", review_on: {date_after: row.opened_on, days: 10}}"))
    lines = check_files([pack])
    assert any("help-desk.yaml" in line and "create_defaults.review_on.date_after" in line
               and "counts from $today" in line for line in lines), lines


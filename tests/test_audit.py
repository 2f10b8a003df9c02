"""The realism audit: planted violations of each rule are caught with table, row and rule; a pack's
declared date meaning overrides the name's; the seed generator keeps dates to the clock and to parents."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from worldfactory.audit import WAITING_GRACE_DAYS, audit_bundle, date_meaning
from worldfactory.spec import ColumnDef

WORLD = "insurance-claims.regional--v001"


@pytest.fixture
def bundle(worlds_dir: Path, tmp_path: Path) -> Path:
    """A copy of the insurance example's spec.json and seed.db, to plant faults in."""
    out = tmp_path / WORLD
    out.mkdir()
    for name in ("spec.json", "seed.db"):
        shutil.copy(worlds_dir / WORLD / name, out / name)
    return out


def _clock(bundle: Path) -> date:
    return date.fromisoformat(json.loads((bundle / "spec.json").read_text())["brief"]["clock"])


def _found(bundle: Path) -> set[tuple[str, str, int, str]]:
    return {(v.rule, v.table, v.row, v.column) for v in audit_bundle(bundle).violations}


def test_the_example_seed_keeps_to_its_clock_and_parents(bundle: Path) -> None:
    report = audit_bundle(bundle)
    assert report.checked_rows > 500
    assert report.violations == [], report.violations[:5]


def test_a_planted_violation_of_each_rule_is_caught_with_table_row_and_rule(bundle: Path) -> None:
    today = _clock(bundle)
    ahead = (today + timedelta(days=9)).isoformat()
    before = _found(bundle)
    with sqlite3.connect(bundle / "seed.db") as conn:
        conn.execute("UPDATE claims SET filed_on = ? WHERE id = 3", (ahead,))  # an event after today
        contact = conn.execute("SELECT min(id) FROM contacts WHERE account_id IS NOT NULL").fetchone()[0]
        conn.execute("UPDATE contacts SET created_on = date((SELECT created_on FROM accounts a WHERE "
                     "a.id = contacts.account_id), '-1 day') WHERE id = ?", (contact,))  # before its account
        conn.execute("UPDATE calendar_events SET status = 'completed', starts_on = ? WHERE id = 2", (ahead,))
        # the pack's invariant 'claims are filed after the incident', on its first offending row
        claim = conn.execute("SELECT min(id) FROM claims WHERE id > 3 AND filed_on < ?",
                             ((today - timedelta(days=2)).isoformat(),)).fetchone()[0]
        conn.execute("UPDATE claims SET incident_date = date(filed_on, '+1 day') WHERE id = ?", (claim,))
    planted = _found(bundle) - before
    assert planted == {("event_after_today", "claims", 3, "filed_on"),
                       ("event_before_parent", "contacts", contact, "created_on"),
                       ("done_but_ahead", "calendar_events", 2, "starts_on"),
                       ("invariant", "claims", claim, "")}
    cli = subprocess.run([sys.executable, "-m", "worldfactory.cli", "audit", str(bundle), "--json"],
                         capture_output=True, text=True, check=False)
    assert cli.returncode == 1, cli.stderr
    [shown] = json.loads(cli.stdout)
    assert {"rule": "done_but_ahead", "table": "calendar_events", "row": 2, "column": "starts_on",
            "detail": f"status 'completed' but starts_on {ahead} is after today {today}"} in shown["violations"]
    assert shown["by_rule"]["event_after_today"] >= 1 and shown["per_1000_rows"] > 0
    assert shown["by_rule"]["invariant"] == 1
    name = "claims are filed after the incident"
    assert {"rule": "invariant", "table": "claims", "row": claim, "column": "",
            "detail": f"invariant '{name}' fails for 1 rows (domains/insurance-claims.yaml: field "
                      f"'invariants[3:{name}].sql')"} in shown["violations"]


def test_a_row_still_waiting_long_past_its_day_is_caught_but_not_one_of_the_last_days(bundle: Path) -> None:
    """Audit rule waiting_but_past: a meeting still scheduled 40 days after it fell is stale; one of three days
    ago, or at the edge of the grace, waits for a task to mark it held."""
    today = _clock(bundle)
    old, recent, edge = ((today - timedelta(days=n)).isoformat() for n in (40, 3, WAITING_GRACE_DAYS))
    before = _found(bundle)
    with sqlite3.connect(bundle / "seed.db") as conn:
        conn.execute("UPDATE calendar_events SET status = 'scheduled', starts_on = ? WHERE id = 4", (old,))
        conn.execute("UPDATE calendar_events SET status = 'scheduled', starts_on = ? WHERE id = 5", (recent,))
        conn.execute("UPDATE calendar_events SET status = 'scheduled', starts_on = ? WHERE id = 6", (edge,))
        conn.execute("UPDATE calendar_events SET status = 'cancelled', starts_on = ? WHERE id = 7", (old,))
    assert _found(bundle) - before == {("waiting_but_past", "calendar_events", 4, "starts_on")}
    [v] = [v for v in audit_bundle(bundle).violations if v.rule == "waiting_but_past"]
    assert v.detail == (f"status 'scheduled' but starts_on {old} is more than {WAITING_GRACE_DAYS} days before "
                        f"today {today}")
    cli = subprocess.run([sys.executable, "-m", "worldfactory.cli", "audit", str(bundle), "--json"],
                         capture_output=True, text=True, check=False)
    assert cli.returncode == 1, cli.stderr
    assert json.loads(cli.stdout)[0]["by_rule"]["waiting_but_past"] == 1


def test_the_seed_keeps_waiting_rows_within_the_grace_and_some_of_the_last_days(worlds_dir: Path) -> None:
    """The generator gives a waiting row's plan date a floor WAITING_GRACE_DAYS before the clock (the insurance
    example held 22 meetings still scheduled a month or more after they fell): none is older, the range maps
    onto the rest (not piled on the floor day), and some fell in the last days for the tasks that mark them."""
    bundle = worlds_dir / WORLD
    today = _clock(bundle)
    floor = (today - timedelta(days=WAITING_GRACE_DAYS)).isoformat()
    with sqlite3.connect(f"file:{bundle / 'seed.db'}?mode=ro", uri=True) as conn:
        stale, on_floor, recent, ahead = conn.execute(
            "SELECT sum(starts_on < ?), sum(starts_on = ?), sum(starts_on >= ? AND starts_on < ?), "
            "sum(starts_on >= ?) FROM calendar_events WHERE status = 'scheduled'",
            (floor, floor, floor, today.isoformat(), today.isoformat())).fetchone()
    assert stale == 0 and recent >= 2 and ahead > recent and on_floor <= 2, (stale, on_floor, recent, ahead)


def test_seeded_approvals_keep_the_rule_their_tool_enforces(bundle: Path) -> None:
    """Issue 31: a claim approved in the seed above the adjuster approval limit breaks the rule in force."""
    spec = json.loads((bundle / "spec.json").read_text())
    cap = spec["brief"]["rules"]["adjuster_approval_limit"]
    with sqlite3.connect(bundle / "seed.db") as conn:
        assert conn.execute("SELECT count(*) FROM claims WHERE approved_amount > ?", (cap,)).fetchone()[0] == 0
        claim = conn.execute("SELECT min(id) FROM claims WHERE status = 'approved'").fetchone()[0]
        conn.execute("UPDATE claims SET approved_amount = ? WHERE id = ?", (cap + 1, claim))
    assert ("limit", "claims", claim, "approved_amount") in _found(bundle)


def test_drafts_carry_no_issue_date_and_capped_dates_do_not_pile_on_today(worlds_dir: Path) -> None:
    """Issue 31: a draft invoice is not issued, a draft filing not filed, a matter in intake not opened; a date
    drawn after another and kept to the clock is drawn within it, not clamped onto today (a third of the
    litigation example's filings were 'filed today', most already accepted)."""
    bundle = worlds_dir / "litigation-firm.national--v001"
    today = json.loads((bundle / "spec.json").read_text())["brief"]["clock"]
    with sqlite3.connect(f"file:{bundle / 'seed.db'}?mode=ro", uri=True) as conn:
        drafts = conn.execute("SELECT count(*), count(issued_on), count(due_on) FROM invoices "
                              "WHERE status = 'draft'").fetchone()
        assert drafts[0] > 0 and drafts[1:] == (0, 0)
        assert conn.execute("SELECT count(*) FROM filings WHERE status = 'draft' AND filed_on IS NOT NULL"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM matters WHERE status = 'intake' AND opened_on IS NOT NULL"
                            ).fetchone()[0] == 0
        on_today, filings = conn.execute("SELECT sum(filed_on = ?), count(*) FROM filings", (today,)).fetchone()
    assert on_today * 20 < filings, (on_today, filings)


def test_a_declared_date_meaning_overrides_the_name(bundle: Path) -> None:
    assert date_meaning(ColumnDef(name="filed_on", type="date")) == "event"
    assert date_meaning(ColumnDef(name="due_on", type="date")) == "period"
    assert date_meaning(ColumnDef(name="scheduled_for", type="date")) == "plan"
    assert date_meaning(ColumnDef(name="filed_on", type="date", date_meaning="plan")) == "plan"
    with sqlite3.connect(bundle / "seed.db") as conn:
        conn.execute("UPDATE claims SET filed_on = ? WHERE id = 3", ((_clock(bundle) + timedelta(days=9)).isoformat(),))
    assert ("event_after_today", "claims", 3, "filed_on") in _found(bundle)
    spec = json.loads((bundle / "spec.json").read_text())
    claims = next(t for t in spec["tables"] if t["name"] == "claims")
    next(c for c in claims["columns"] if c["name"] == "filed_on")["date_meaning"] = "period"
    (bundle / "spec.json").write_text(json.dumps(spec))
    assert ("event_after_today", "claims", 3, "filed_on") not in _found(bundle)


def test_date_meaning_is_for_dates_only() -> None:
    with pytest.raises(ValidationError, match="date_meaning is for date columns; 'amount' is of type money"):
        ColumnDef(name="amount", type="money", date_meaning="event")
    assert "date_meaning" not in ColumnDef(name="filed_on", type="date").model_dump()


def test_the_seed_proof_refuses_a_seed_that_breaks_the_clock(bundle: Path) -> None:
    from worldfactory.generate.data import SeedDataError, check_seed
    from worldfactory.spec import WorldSpec

    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    assert check_seed(spec, (bundle / "seed.db").read_bytes())["rows"] > 0
    with sqlite3.connect(bundle / "seed.db") as conn:
        conn.execute("UPDATE claims SET filed_on = ? WHERE id = 3", ((_clock(bundle) + timedelta(days=9)).isoformat(),))
    with pytest.raises(SeedDataError, match=r"realism audit: 1 dates or .* event_after_today: claims row 3: filed_on"):
        check_seed(spec, (bundle / "seed.db").read_bytes())


def test_every_date_column_of_every_pack_and_module_declares_its_meaning(tmp_path: Path) -> None:
    from worldfactory.packs import check_files, undeclared_dates
    from worldfactory.templates import load_templates

    ts = load_templates()
    assert len(ts.domains) == 25
    dates = 0
    for kind, items in (("domains", ts.domains), ("modules", ts.modules)):
        for name, pack in sorted(items.items()):
            assert undeclared_dates(ts.root / kind / f"{name}.yaml", pack.tables) == []
            dates += sum(c.type == "date" for t in pack.tables for c in t.columns)
    assert dates > 250
    # planted: one date column loses its meaning; check-pack names the file, the field and what to write
    root = tmp_path / "templates"
    shutil.copytree(ts.root, root)
    pack = root / "domains" / "insurance-claims.yaml"
    text = pack.read_text()
    assert "{name: filed_on, type: date, date_meaning: event," in text
    pack.write_text(text.replace("{name: filed_on, type: date, date_meaning: event,", "{name: filed_on, type: date,"))
    [line] = check_files([pack])
    assert line.startswith(f"{pack}: field 'tables[") and ":claims].columns[" in line
    assert ":filed_on].date_meaning': a date column needs date_meaning: event" in line
    assert line.endswith("its name reads as 'event'")

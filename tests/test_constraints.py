"""Cross-record constraints (worldfactory/constraints.py): a planted violation of each kind fails the audit and
the seed proof with table, row and rule; the generator fits rows to them (and without fitting they break);
a bad declaration fails with its file and field."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from worldfactory.audit import audit_bundle, audit_image
from worldfactory.briefs import expand_world
from worldfactory.constraints import nearest_day
from worldfactory.generate.data import SeedDataError, build_seed_db, check_seed
from worldfactory.generate.schema import build_spec
from worldfactory.spec import CONSTRAINT_KINDS, TableDef, WorldSpec, constraint_kind
from worldfactory.templates import TemplateError, load_templates

WORLD = "insurance-claims.regional--v001"
ROOT = Path(__file__).resolve().parents[1]
PAYMENT_IS_THE_APPROVED_AMOUNT = {"same": "amount", "as": "claim_id.approved_amount"}
# an invoice whose due date has passed has been issued (drafts carry no due date, so it holds as built)
PAST_DUE_IS_ISSUED = {"past": "due_on", "then": "status", "allowed": ["open", "paid", "void"]}


@pytest.fixture
def bundle(worlds_dir: Path, tmp_path: Path) -> Path:
    """A copy of the insurance example's spec.json and seed.db, to plant faults in; its claim payments also
    declare `same` (a payment is of its claim's approved amount) and its invoices `past` (past due is issued),
    the kinds the pack itself does not use."""
    out = tmp_path / WORLD
    out.mkdir()
    for name in ("spec.json", "seed.db"):
        shutil.copy(worlds_dir / WORLD / name, out / name)
    spec = json.loads((out / "spec.json").read_text())
    payments = next(t for t in spec["tables"] if t["name"] == "claim_payments")
    payments.setdefault("constraints", []).append(PAYMENT_IS_THE_APPROVED_AMOUNT)
    invoices = next(t for t in spec["tables"] if t["name"] == "invoices")
    invoices.setdefault("constraints", []).append(PAST_DUE_IS_ISSUED)
    (out / "spec.json").write_text(json.dumps(spec))
    return out


def _found(bundle: Path) -> set[tuple[str, str, int, str]]:
    return {(v.rule, v.table, v.row, v.column) for v in audit_bundle(bundle).violations}


def _one(conn: sqlite3.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    assert row is not None and row[0] is not None, sql
    return int(row[0])


def test_the_example_declares_and_keeps_every_kind(bundle: Path) -> None:
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    kinds = {constraint_kind(c) for t in spec.tables for c in t.constraints}
    assert kinds == set(CONSTRAINT_KINDS), kinds
    report = audit_bundle(bundle)
    assert report.violations == [], report.violations[:5]


def test_a_planted_violation_of_each_kind_is_caught_with_table_row_and_rule(bundle: Path) -> None:
    assert _found(bundle) == set()
    with sqlite3.connect(bundle / "seed.db") as conn:
        paid = _one(conn, "SELECT min(c.id) FROM claims c JOIN claim_payments p ON p.claim_id = c.id "
                          "WHERE c.status IN ('paid', 'closed')")
        conn.execute("UPDATE claims SET approved_amount = approved_amount + 100 WHERE id = ?", (paid,))  # total
        other = _one(conn, f"SELECT min(id) FROM claims WHERE id <> {paid}")
        conn.execute("UPDATE claims SET amount_claimed = (SELECT coverage_limit + 1 FROM insurance_policies p "
                     "WHERE p.id = claims.policy_id) WHERE id = ?", (other,))  # band
        auto = _one(conn, f"SELECT min(c.id) FROM claims c JOIN insurance_policies p ON p.id = c.policy_id "
                          f"WHERE p.line = 'home' AND c.id NOT IN ({paid}, {other})")
        conn.execute("UPDATE claims SET incident_type = 'collision' WHERE id = ?", (auto,))  # category
        conn.execute("UPDATE approval_requests SET status = 'approved', amount = "
                     "(SELECT value + 1 FROM business_rules WHERE name = 'approval_limit') WHERE id = 1")  # limit
        gone = _one(conn, "SELECT requested_by FROM approval_requests WHERE id = 2")
        conn.execute("UPDATE approval_requests SET status = 'pending' WHERE id = 2")
        conn.execute("UPDATE users SET active = 0 WHERE id = ?", (gone,))  # refers: every open item of theirs
        payment = _one(conn, "SELECT min(id) FROM claim_payments")
        conn.execute("UPDATE claim_payments SET amount = amount + 1 WHERE id = ?", (payment,))  # same (and total)
        payment_claim = _one(conn, f"SELECT claim_id FROM claim_payments WHERE id = {payment}")
        draft = _one(conn, "SELECT min(id) FROM invoices WHERE status = 'draft'")
        conn.execute("UPDATE invoices SET due_on = date(?, '-3 days') WHERE id = ?",
                     (json.loads((bundle / "spec.json").read_text())["brief"]["clock"], draft))  # past
        stranded = {("refers", t, r, c) for t, c, r in conn.execute(
            "SELECT 'approval_requests', 'requested_by', id FROM approval_requests WHERE requested_by = ? "
            "AND status IN ('pending', 'escalated') UNION ALL SELECT 'calendar_events', 'organizer_id', id "
            "FROM calendar_events WHERE organizer_id = ? AND status = 'scheduled' UNION ALL SELECT 'accounts', "
            "'owner_id', id FROM accounts WHERE owner_id = ? AND status IN ('prospect', 'active') UNION ALL SELECT "
            "'claims', 'adjuster_id', id FROM claims WHERE adjuster_id = ? AND status IN ('filed', 'under_review', "
            "'fraud_review', 'approved', 'denied') UNION ALL SELECT 'fraud_reviews', 'reviewer_id', id FROM "
            "fraud_reviews WHERE reviewer_id = ? AND outcome = 'pending'", (gone,) * 5)}
    found = _found(bundle)
    assert found == {("total", "claims", paid, "approved_amount"), ("band", "claims", other, "amount_claimed"),
                     ("category", "claims", auto, "incident_type"), ("limit", "approval_requests", 1, "amount"),
                     ("same", "claim_payments", payment, "amount"), ("total", "claims", payment_claim,
                     "approved_amount"), ("past", "invoices", draft, "status"), *stranded}
    assert ("refers", "approval_requests", 2, "requested_by") in found
    cli = subprocess.run([sys.executable, "-m", "worldfactory.cli", "audit", str(bundle), "--json"],
                         capture_output=True, text=True, check=False)
    assert cli.returncode == 1, cli.stderr
    [shown] = json.loads(cli.stdout)
    assert {k: shown["by_rule"][k] for k in ("band", "category", "limit", "same")} == {
        "band": 1, "category": 1, "limit": 1, "same": 1}
    category = next(v for v in shown["violations"] if v["rule"] == "category")
    assert category["detail"].startswith("incident_type 'collision' is not one of water_damage, fire, theft, storm "
                                         "for policy_id.line 'home'")
    limit = next(v for v in shown["violations"] if v["rule"] == "limit")
    assert "is above the rule approval_limit" in limit["detail"] and "status approved" in limit["detail"]


def test_the_seed_proof_refuses_a_seed_that_breaks_a_constraint(bundle: Path) -> None:
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    assert check_seed(spec, (bundle / "seed.db").read_bytes())["rows"] > 0
    with sqlite3.connect(bundle / "seed.db") as conn:
        conn.execute("UPDATE claims SET amount_claimed = (SELECT coverage_limit + 1 FROM insurance_policies p "
                     "WHERE p.id = claims.policy_id) WHERE id = 4")
    with pytest.raises(SeedDataError, match=r"realism audit: 1 .*'band': 1.* band: claims row 4: amount_claimed "
                                            r"[0-9.]+ is outside insurance_policies [0-9]+'s band"):
        check_seed(spec, (bundle / "seed.db").read_bytes())


@pytest.mark.parametrize(("world_id", "kinds"), [("payroll.regional--v001", {"total", "band", "limit", "refers"}),
                                                  ("hotel-operations.startup--v001", {"same", "band", "limit"}),
                                                  (WORLD, {"band", "category", "limit", "refers"})])
def test_the_generator_fits_rows_that_would_break_them(world_id: str, kinds: set[str]) -> None:
    """Drawn as the generators say, rows break the constraints (a paycheck's lines do not add up to its gross
    pay, a reservation's room is of another type); fitted, none is broken, and the bytes are the same each time."""
    ts = load_templates()
    spec = build_spec(expand_world(world_id, ts), ts)
    drawn = audit_image(spec, build_seed_db(spec, ts.vocabulary, fit=False)).by_rule()
    image = build_seed_db(spec, ts.vocabulary)
    assert audit_image(spec, image).violations == []
    assert build_seed_db(spec, ts.vocabulary) == image
    assert kinds <= {k for k, n in drawn.items() if n}, drawn
    conn = sqlite3.connect(":memory:")
    conn.deserialize(image)
    if world_id.startswith("payroll"):  # the lines were scaled to the gross pay, so net pay stays below it
        off = conn.execute("SELECT count(*) FROM paychecks p JOIN (SELECT paycheck_id, sum(amount) s FROM "
                           "earnings_lines GROUP BY paycheck_id) l ON l.paycheck_id = p.id "
                           "WHERE abs(p.gross_pay - l.s) > 0.005").fetchone()[0]
        below = conn.execute("SELECT count(*) FROM paychecks WHERE net_pay > gross_pay").fetchone()[0]
        assert (off, below) == (0, 0)


TAX_DUE = {"q1": "04-30", "q2": "07-31", "q3": "10-31", "q4": "01-31", "annual": "01-31"}


def test_a_tax_filing_is_due_on_its_period_s_day() -> None:
    """payroll's `{category: due_on, by: tax_period, month_days: ...}`: drawn around the clock, a filing's due
    date ignores its period; fitted, a quarter's return is due the last day of the month after it and an annual
    one on January 31, near the drawn date; a planted wrong date is reported with table, row and rule."""
    ts = load_templates()
    spec = build_spec(expand_world("payroll.regional--v001", ts), ts)

    def wrong(image: bytes) -> list[tuple[int, str, str]]:
        conn = sqlite3.connect(":memory:")
        conn.deserialize(image)
        rows = conn.execute("SELECT id, tax_period, due_on FROM tax_filings").fetchall()
        assert rows
        return [r for r in rows if r[2][5:] != TAX_DUE[r[1]]]

    drawn = build_seed_db(spec, ts.vocabulary, fit=False)
    assert len(wrong(drawn)) > 10
    assert {(v.rule, v.table, v.column) for v in audit_image(spec, drawn).violations} >= {
        ("category", "tax_filings", "due_on")}
    image = build_seed_db(spec, ts.vocabulary)
    assert wrong(image) == [] and audit_image(spec, image).violations == []
    conn = sqlite3.connect(":memory:")
    conn.deserialize(image)
    period = conn.execute("SELECT tax_period FROM tax_filings WHERE id = 3").fetchone()[0]
    with conn:
        conn.execute("UPDATE tax_filings SET due_on = '2026-05-15' WHERE id = 3")
    [v] = audit_image(spec, conn.serialize()).violations
    assert (v.rule, v.table, v.row, v.column) == ("category", "tax_filings", 3, "due_on")
    assert v.detail == f"due_on 2026-05-15 does not fall on {TAX_DUE[period]} (MM-DD) for tax_period '{period}'"


def test_nearest_day_keeps_a_date_near_where_it_was_drawn() -> None:
    assert nearest_day("2026-05-20", ["04-30"]) == "2026-04-30"
    assert nearest_day("2026-12-20", ["01-31"]) == "2027-01-31"
    assert nearest_day("2026-03-01", ["02-29"]) == "2028-02-29"  # a day only leap years have
    assert nearest_day("2026-06-15", ["04-30", "07-31"]) == "2026-04-30"  # 46 days either way: the earlier
    assert nearest_day("2026-06-20", ["04-30", "07-31"]) == "2026-07-31"


def test_a_table_without_constraints_keeps_its_bytes() -> None:
    table = TableDef(name="t", singular="t", rows=1, columns=[])
    assert "constraints" not in table.model_dump()
    assert "constraints" in TableDef(name="t", singular="t", rows=1, columns=[{"name": "x", "type": "money"}],
                                     constraints=[{"limit": "x", "rule": "r"}]).model_dump()
    allowed = TableDef(name="t", singular="t", rows=1, columns=[{"name": "x"}, {"name": "k"}],
                       constraints=[{"category": "x", "by": "k", "allowed": {"a": ["b"]}}]).model_dump()
    assert "month_days" not in allowed["constraints"][0]  # a category that predates month_days keeps its bytes


BAD = [
    ({"band": "full_name", "ref": "policy_id", "max": "coverage_limit"}, "constraints[0:band].band",
     "claims.full_name|has no column 'full_name'"),
    ({"band": "amount_claimed", "ref": "status", "max": "coverage_limit"}, "constraints[0:band].ref",
     "claims.status is not a ref"),
    ({"limit": "amount_claimed", "rule": "no_such_rule"}, "constraints[0:limit].rule", "no rule 'no_such_rule'"),
    ({"limit": "status", "rule": "adjuster_approval_limit"}, "constraints[0:limit].limit",
     "claims.status is of type text; this constraint needs a number"),
    ({"category": "incident_type", "by": "policy_id.line", "allowed": {"boat": ["fire"]}},
     "constraints[0:category].allowed.boat", "'boat' is not a value of policy_id.line"),
    ({"category": "incident_type", "by": "policy_id.line", "allowed": {"auto": ["meteor"]}},
     "constraints[0:category].allowed.auto", "meteor not in claims.incident_type's enum"),
    ({"total": "approved_amount", "of": "no_lines.amount"}, "constraints[0:total].of", "'no_lines' is not a table"),
    ({"refers": "adjuster_id", "to": {"active": [True]}, "when": {"status": ["lost"]}},
     "constraints[0:refers].when.status", "'lost' is not a value of claims.status"),
    ({"same": "policy_id", "as": "adjuster_id.no_column"}, "constraints[0:same].as", "no column 'no_column'"),
    ({"past": "amount_claimed", "then": "status", "allowed": ["denied"]}, "constraints[0:past].past",
     "claims.amount_claimed is of type money; 'past' names a date column"),
    ({"past": "filed_on", "then": "status", "allowed": ["lapsed"]}, "constraints[0:past].allowed",
     "lapsed not in claims.status's enum"),
    ({"category": "amount_claimed", "by": "policy_id.line", "month_days": {"auto": ["04-30"]}},
     "constraints[0:category].category", "claims.amount_claimed is of type money; month_days names"),
    ({"category": "filed_on", "by": "policy_id.line", "month_days": {"boat": ["04-30"]}},
     "constraints[0:category].month_days.boat", "'boat' is not a value of policy_id.line"),
    ({"band": "incident_date", "ref": "policy_id", "min": "start_date", "max": "coverage_limit"},
     "constraints[0:band].max", "insurance_policies.coverage_limit is of type money; the band of a date"),
]


def _templates_with_claims_constraint(tmp_path: Path, constraint: dict[str, object]) -> Path:
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    path = root / "domains" / "insurance-claims.yaml"
    pack = yaml.safe_load(path.read_text())
    claims = next(t for t in pack["tables"] if t["name"] == "claims")
    claims["constraints"] = [constraint]
    path.write_text(yaml.safe_dump(pack, sort_keys=False))
    return root


@pytest.mark.parametrize(("constraint", "field", "message"), BAD, ids=[b[1] for b in BAD])
def test_a_bad_declaration_fails_with_its_file_and_field(tmp_path: Path, constraint: dict[str, object], field: str,
                                                         message: str) -> None:
    root = _templates_with_claims_constraint(tmp_path, constraint)
    with pytest.raises(TemplateError) as caught:
        load_templates(root)
    text = str(caught.value)
    line = next((x for x in text.splitlines() if f"field 'tables[2:claims].{field}'" in x), None)
    assert line is not None, text
    assert "domains/insurance-claims.yaml" in line and any(m in line for m in message.split("|")), line


def test_a_declaration_of_an_unknown_kind_or_shape_names_the_file_and_field(tmp_path: Path) -> None:
    root = _templates_with_claims_constraint(tmp_path, {"average": "amount_claimed"})
    with pytest.raises(TemplateError, match=r"insurance-claims.yaml.*tables\[2:claims\]\.constraints\[0\].*"
                                            r"'average'.*'total', 'band', 'limit', 'category', 'refers', 'same'"):
        load_templates(root)
    root = _templates_with_claims_constraint(tmp_path / "b", {"band": "amount_claimed", "ref": "policy_id"})
    with pytest.raises(TemplateError, match=r"insurance-claims.yaml.*constraints\[0\].*a band needs 'min' or 'max'"):
        load_templates(root)
    root = _templates_with_claims_constraint(tmp_path / "c", {"category": "filed_on", "by": "policy_id.line",
                                                              "month_days": {"auto": ["4-30"]}})
    with pytest.raises(TemplateError, match=r"insurance-claims.yaml.*constraints\[0\].*month_days.auto: '4-30' is "
                                            r"not a day of the year as MM-DD"):
        load_templates(root)


def test_a_shared_modules_note_reads_like_the_domain_it_joins() -> None:
    """DomainPack.texts: payroll's notes are drawn from payroll's wording, not the shared customer-service lines."""
    ts = load_templates()
    spec = build_spec(expand_world("payroll.regional--v001", ts), ts)
    conn = sqlite3.connect(":memory:")
    conn.deserialize(build_seed_db(spec, ts.vocabulary))
    # A phoned-in request (generate/inbox.py) is the world's own work, worded from the record it names.
    bodies = {b for (b,) in conn.execute("SELECT body FROM notes") if not b.startswith("Phone message: ")}
    assert bodies and bodies <= set(ts.domains["payroll"].texts["notes.body"]), bodies - set(
        ts.domains["payroll"].texts["notes.body"])
    assert not bodies & set(ts.vocabulary.sentences)


@pytest.mark.parametrize(("key", "message"), [("paychecks.note", "'paychecks' is not a table of a shared module"),
                                              ("notes.subject_id", "'subject_id' is not a free-text column of notes")])
def test_a_text_for_something_that_is_not_a_modules_free_text_names_the_file_and_field(
        tmp_path: Path, key: str, message: str) -> None:
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    path = root / "domains" / "payroll.yaml"
    pack = yaml.safe_load(path.read_text())
    pack["texts"][key] = ["One.", "Two."]
    path.write_text(yaml.safe_dump(pack, sort_keys=False))
    with pytest.raises(TemplateError, match=rf"domains/payroll.yaml: field 'texts.{key}': {message}"):
        load_templates(root)

"""Related records in guards and effects: a step reads the record one of its row's `ref` columns points at
(`ref.pool_id.remaining`), refuses when a guard over it fails, and updates it with arithmetic
(`{calc: "ref.pool_id.remaining - row.fee"}`; `set` computes too), flipping it only `when` a condition
holds. Task generation judges the guard as the tool does, the oracle's gold diff carries the related
update (a plan that skips it fails its verifier), and check-pack names the file and field of a bad declaration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory.expressions import ExpressionError, evaluate, parse, references
from worldfactory.packs import check_files
from worldfactory.runtime.world import World
from worldfactory.spec import Effect
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

POOLS = """
  - name: credit_pools
    singular: credit pool
    label: code
    rows: 8
    columns:
      - {name: code, unique: true, gen: {code: "POOL-{n:02d}"}}
      - {name: remaining, type: money, minimum: 0, gen: {choice: [0, 60, 150, 900], weights: [2, 1, 2, 3]}}
      - {name: granted, type: money, minimum: 0, gen: {const: 0}}
      - {name: grants, type: integer, minimum: 0, gen: {const: 0}}
      - {name: state, enum: [active, exhausted], gen: {const: active}}
    search: [code, state]
"""
STEP = "          set: {credit: row.fee}\n"
GUARD = ('            - {field: row.fee, op: "<=", rule: credit_limit, message: "the fee exceeds the service credit '
         'limit", says: "its fee is within our service credit limit"}\n')
POOL_GUARD = ('            - {field: "ref.pool_id.remaining - row.fee", op: ">=", value: 0, '
              'message: "the credit pool cannot cover the fee", says: "its credit pool covers the fee"}\n')
EFFECTS = """          effects:
            - update: credit_pools
              ref: pool_id
              values: {remaining: {calc: "ref.pool_id.remaining - row.fee"},
                       granted: {calc: "ref.pool_id.granted + row.fee"}, grants: {calc: "ref.pool_id.grants + 1"}}
            - update: credit_pools
              ref: pool_id
              when: {field: ref.pool_id.remaining, op: "<", value: 50}
              values: {state: exhausted}
"""


def _pack(tmp_path: Path, *, guard: str = POOL_GUARD, effects: str = EFFECTS) -> Path:
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    assert STEP in text and GUARD in text and "tables:\n" in text
    text = text.replace("      - {name: credit, type: money",
                        "      - {name: pool_id, type: integer, ref: credit_pools}\n      - {name: credit, type: money")
    text = text.replace("    rows: 40\n", "    rows: 120\n", 1)  # enough open requests on either side of the guard
    text = text.replace("create: [reference, account_id, fee]", "create: [reference, account_id, fee, pool_id]")
    text = text.replace(GUARD, GUARD + guard)
    text = text.replace(STEP, '          set: {credit: {calc: "row.fee * 0.5"}}\n' + effects)
    text = text.replace("tables:\n", "tables:" + POOLS, 1)
    pack.write_text(text)
    return root


def test_related_reads_parse_and_evaluate() -> None:
    assert references("ref.pool_id.remaining - row.fee") == [("ref", "pool_id.remaining"), ("row", "fee")]
    assert evaluate("ref.pool_id.remaining - row.fee", {"fee": 30, "ref.pool_id.remaining": 100}, {}) == 70
    assert evaluate("ref.pool_id.remaining - row.fee", {"fee": 30}, {}) is None  # no related record: fails
    for text in ("ref.pool_id", "ref.a.b.c", "other.a.b", "row.a.b", "ref.__class__.x"):
        with pytest.raises(ExpressionError):
            parse(text)


def test_an_effect_needs_exactly_one_kind_and_an_update_its_ref() -> None:
    with pytest.raises(ValueError, match="exactly one of 'create' or 'update'"):
        Effect.model_validate({"create": "a", "update": "b", "ref": "x", "values": {}})
    with pytest.raises(ValueError, match="needs 'ref'"):
        Effect.model_validate({"update": "b", "values": {}})
    assert Effect.model_validate({"create": "a", "values": {"x": 1}}).model_dump() == {"create": "a",
                                                                                        "values": {"x": 1}}


def test_a_step_updates_its_related_record_and_refuses_when_the_guard_over_it_fails(tmp_path: Path) -> None:
    ts = load_templates(_pack(tmp_path))
    build_world(SMALL[0], tmp_path / "out", ts)  # every oracle replays against the tool, verifiers proved
    world = World.open(tmp_path / "out" / "worlds" / SMALL[0])
    source = (world.path / "tools.py").read_text()
    assert "ref_pool_id = db.get('credit_pools', row['pool_id'], 'credit pool')" in source
    assert "if db.holds(" in source
    pools = {i: dict(zip(("id", "code", "remaining", "granted", "grants", "state"), r, strict=True))
             for i, r in world.seed_rows("credit_pools").items()}
    names = ("id", "reference", "account_id", "opened_on", "fee", "pool_id", "credit", "status")
    requests = [dict(zip(names, r, strict=True)) for r in world.seed_rows("requests").values()]
    limit = world.brief.rules["credit_limit"]
    ok = [r for r in requests if r["status"] == "open" and r["fee"] <= limit
          and pools[r["pool_id"]]["remaining"] >= r["fee"]]
    short = [r for r in requests if r["status"] == "open" and r["fee"] <= limit
             and pools[r["pool_id"]]["remaining"] < r["fee"]]
    assert ok and short
    with world.episode() as ep:
        r = ok[0]
        before = pools[r["pool_id"]]
        res = ep.call("grant_credit", {"request_id": r["id"]})
        assert res.ok, res.error
        after = ep.call("get_credit_pool", {"credit_pool_id": r["pool_id"]}).result["credit_pool"]
        assert res.result["updated_credit_pool"] == after  # the call returns the record it updated
        assert res.result["request"]["credit"] == round(r["fee"] * 0.5, 2)  # arithmetic in `set`
        assert after["remaining"] == round(before["remaining"] - r["fee"], 2)
        assert after["granted"] == round(before["granted"] + r["fee"], 2) and after["grants"] == before["grants"] + 1
        assert after["state"] == ("exhausted" if after["remaining"] < 50 else "active")
        s = short[0]
        res = ep.call("grant_credit", {"request_id": s["id"]})
        assert not res.ok and "the credit pool cannot cover the fee" in (res.error or "")
        assert ep.call("get_request", {"request_id": s["id"]}).result["request"]["status"] == "open"
    # a pool driven below 50 flips to exhausted, and one left above it does not
    flips = [r for r in ok if pools[r["pool_id"]]["remaining"] - r["fee"] < 50]
    stays = [r for r in ok if pools[r["pool_id"]]["remaining"] - r["fee"] >= 50]
    for rows, state in ((flips, "exhausted"), (stays, "active")):
        if rows:
            with world.episode() as ep:
                assert ep.call("grant_credit", {"request_id": rows[0]["id"]}).ok
                pool = ep.call("get_credit_pool", {"credit_pool_id": rows[0]["pool_id"]}).result["credit_pool"]
                assert pool["state"] == state
    assert flips or stays
    # tasks were drawn only where the pool covers the fee: no task's oracle grants a credit it cannot
    granted = [c.args["request_id"] for t in world.tasks.values() for c in t.oracle if c.tool == "grant_credit"]
    assert granted and not {s["id"] for s in short} & set(granted)


def test_a_plan_that_skips_the_related_update_fails_its_verifier(tmp_path: Path) -> None:
    ts = load_templates(_pack(tmp_path))
    build_world(SMALL[0], tmp_path / "out", ts)
    world = World.open(tmp_path / "out" / "worlds" / SMALL[0])
    task = next(t for t in world.tasks.values() if [c.tool for c in t.oracle if c.tool == "grant_credit"])
    gold = world.verifiers["tasks"][task.task_id]["diff"]
    assert "credit_pools" in gold  # the gold end state carries the pool's new balance
    for skip in (False, True):
        with world.episode(task.task_id) as ep:
            for call in task.oracle:
                assert ep.call(call.tool, call.args).ok
            if skip:  # the planted fault: the request is resolved, its pool left as it was
                for pool_id, row in world.seed_rows("credit_pools").items():
                    ep.conn.execute("UPDATE credit_pools SET remaining = ?, granted = ?, grants = ?, state = ? "
                                    "WHERE id = ?", (*row[2:], pool_id))
            verdict = ep.verify(task.answer)
        assert verdict.passed is (not skip), verdict


@pytest.mark.parametrize(("guard", "effects", "field", "said"), [
    (POOL_GUARD.replace("ref.pool_id.remaining", "ref.pool_id.balance"), EFFECTS, "guards[1].field",
     "has no column 'balance'"),
    (POOL_GUARD.replace("ref.pool_id.remaining", "ref.fee.remaining"), EFFECTS, "guards[1].field",
     "'ref.fee' reads through a column"),
    (POOL_GUARD, EFFECTS.replace("ref.pool_id.remaining - row.fee", "ref.pool_id.remaining ** row.fee"),
     "effects[0].values.remaining", "not one of + - * /"),
    (POOL_GUARD, EFFECTS.replace("ref: pool_id", "ref: account_id", 1),
     "effects[0].ref", "not a column of 'requests' that is a `ref` to 'credit_pools'"),
    (POOL_GUARD, EFFECTS.replace("{state: exhausted}", "{state: drained}"), "effects[1].values.state",
     "'drained' is not in the enum"),
    (POOL_GUARD, EFFECTS.replace("{state: exhausted}", "{code: {calc: \"row.fee\"}}"), "effects[1].values.code",
     "a computed value is a number"),
    (POOL_GUARD, EFFECTS.replace("field: ref.pool_id.remaining,", "field: ref.pool_id.nope,"),
     "effects[1].when.field", "has no column 'nope'"),
])
def test_a_bad_declaration_is_refused_naming_the_file_and_field(tmp_path: Path, guard: str, effects: str,
                                                                 field: str, said: str) -> None:
    root = _pack(tmp_path, guard=guard, effects=effects)
    lines = check_files([root / "domains" / "help-desk.yaml"])
    assert any("help-desk.yaml" in line and field in line and said in line for line in lines), lines



def test_a_guard_compares_a_related_records_status(tmp_path: Path) -> None:
    """`ref.<col>.<name> == <text>`: payroll issues a paycheck only from an approved pay run. The tool refuses a
    pending check of a run in another state, and no task asks for that step there."""
    assert evaluate("ref.pay_run_id.status", {"ref.pay_run_id.status": "approved"}, {}) == "approved"
    assert evaluate("ref.pool_id.remaining", {"ref.pool_id.remaining": 7}, {}) == 7.0
    world_id = "payroll.startup--v001"
    build_world(world_id, tmp_path, load_templates())
    world = World.open(tmp_path / "worlds" / world_id)
    db = sqlite3.connect(world.path / "seed.db")
    runs = dict(db.execute("SELECT id, status FROM pay_runs").fetchall())
    pending = db.execute("SELECT id, pay_run_id FROM paychecks WHERE status = 'pending'").fetchall()
    issued = db.execute("SELECT pay_run_id FROM paychecks WHERE status IN ('issued', 'cleared', 'stopped')").fetchall()
    assert {runs[r] for (r,) in issued} <= {"approved", "paid"}  # the seed keeps the rule too
    ready = [c for c, r in pending if runs[r] == "approved"]
    held = [c for c, r in pending if runs[r] != "approved"]
    assert ready and held
    with world.episode() as ep:
        res = ep.call("issue_paycheck", {"paycheck_id": held[0]})
        assert not res.ok and "its pay run is not approved" in (res.error or "")
        assert ep.call("issue_paycheck", {"paycheck_id": ready[0]}).ok
    asked = {c.args["paycheck_id"] for t in world.tasks.values() for c in t.oracle if c.tool == "issue_paycheck"}
    assert asked and not asked & set(held)

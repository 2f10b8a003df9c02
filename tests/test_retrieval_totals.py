"""Retrieval totals that add up (issue 31): a question totals only a money column whose sum means something;
a price of one unit (a unit price, a nightly rate) or a column its pack marks `additive: false` (a
deductible, competing bids) is asked for its highest value instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_packs import _break, _templates
from worldfactory.briefs import expand_world
from worldfactory.generate.data import build_seed_db
from worldfactory.generate.schema import build_spec
from worldfactory.generate.tasks import retrieval
from worldfactory.generate.tasks.builder import TaskBuilder
from worldfactory.templates import TemplateError, load_templates


def test_only_amounts_are_totalled() -> None:
    """Across every pack and module: unit prices, rates and marked columns are never summed; amounts are."""
    ts = load_templates()
    tables = [t for pack in ts.domains.values() for t in pack.tables] + [t for m in ts.modules.values()
                                                                       for t in m.tables]
    money = {(t.name, c.name): c for t in tables for c in t.columns if c.type == "money"}
    summed = {key for key, c in money.items() if retrieval._summable(c)}
    for key in [("order_items", "unit_price"), ("po_lines", "unit_price"), ("time_entries", "rate"),
                ("insurance_policies", "deductible"), ("bids", "amount"), ("positions", "salary_band_max")]:
        assert key in money and key not in summed, key
    for key in [("orders", "total"), ("invoices", "amount"), ("paychecks", "gross_pay")]:
        assert key in summed, key


def test_a_unit_price_is_asked_for_its_highest_not_its_total() -> None:
    """Commerce: "the total unit price across the order items" was asked before; now the highest, with the
    answer the largest unit price among the order's items."""
    ts = load_templates()
    spec = build_spec(expand_world("commerce-operations.startup--v001", ts), ts)
    tools = {f"{verb}_{t.name}" for t in spec.tables for verb in ("search", "get")}
    b = TaskBuilder(spec, tools, build_seed_db(spec, ts.vocabulary), None, ts.vocabulary)
    try:
        cand = next(c for c in retrieval.candidates(b).pools[1] if c[1].name == "order_items")
        plan = retrieval.plan(b, cand)
        assert plan is not None
        assert plan.instruction.startswith("What is the highest unit price among the order items of order ")
        prices = [float(r["unit_price"]) for r in b.children(cand[1], cand[2], cand[3])]
        assert plan.answer == round(max(prices), 2)
    finally:
        b.close()


def test_additive_is_for_numeric_columns(tmp_path: Path) -> None:
    root = _templates(tmp_path)
    path = _break(root, "{name: claim_number, ", "{name: claim_number, additive: false, ")
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    assert f"{path}: field 'tables[2:claims].columns[0:claim_number]'" in str(err.value)
    assert "additive is for numeric columns; 'claim_number' is of type text" in str(err.value)

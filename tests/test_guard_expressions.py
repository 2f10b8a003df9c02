"""Guard expressions: a pack caps a computed value (`row.fee * 0.5 <= credit_limit`); the generated
tool and the task generator agree on it; anything beyond arithmetic over row/param values is refused
at load with the file and field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory.expressions import ExpressionError, evaluate, parse, references
from worldfactory.packs import check_files
from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

GUARD = '{field: row.fee, op: "<=", rule: credit_limit,'


def _pack(tmp_path: Path, field: str) -> Path:
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    assert GUARD in text
    pack.write_text(text.replace(GUARD, f'{{field: "{field}", op: "<=", rule: credit_limit,'))
    return root


def test_arithmetic_and_its_missing_values() -> None:
    assert evaluate("(param.rent - row.rent) / row.rent", {"rent": 1000}, {"rent": 1100}) == pytest.approx(0.1)
    assert evaluate("-row.a * 2 + 3", {"a": 4}, {}) == -5
    assert evaluate("row.a / row.b", {"a": 1, "b": 0}, {}) is None  # no division by zero: the guard fails
    assert evaluate("row.a + 1", {"a": None}, {}) is None
    assert references("row.a * param.b - row.a") == [("row", "a"), ("param", "b")]


@pytest.mark.parametrize("text", ["__import__('os').system('id')", "row.fee ** 2", "row.__class__", "open",
                                  "row.fee if row.fee else 1", "[row.fee]", "row.fee < 3", "(lambda: 1)()",
                                  "'a' * 3", "True + 1", "row.fee % 2", "x" * 300])
def test_anything_else_does_not_parse(text: str) -> None:
    with pytest.raises(ExpressionError):
        parse(text)


def test_a_bad_expression_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    for field, said in (("row.fee ** 2", "not one of + - * /"), ("row.missing * 2", "no column 'missing'"),
                        ("__import__('os')", "")):
        lines = check_files([_pack(tmp_path / field[:6].replace(".", "_").replace("*", "x").replace("(", "p"),
                                   field) / "domains" / "help-desk.yaml"])
        assert any("help-desk.yaml" in line and "guards" in line and said in line for line in lines), (field, lines)


def test_a_computed_cap_holds_in_the_tool_and_in_the_tasks(tmp_path: Path) -> None:
    ts = load_templates(_pack(tmp_path, "row.fee * 0.5 - row.credit"))
    build_world(SMALL[0], tmp_path / "out", ts)  # conditional and decline tasks replay against the tool
    world = World.open(tmp_path / "out" / "worlds" / SMALL[0])
    assert "db.calc('row.fee * 0.5 - row.credit'" in (world.path / "tools.py").read_text()
    limit = world.brief.rules["credit_limit"]
    rows = [dict(zip(("id", "reference", "account_id", "opened_on", "fee", "credit", "status"), r, strict=True))
            for r in world.seed_rows("requests").values()]
    open_rows = [r for r in rows if r["status"] == "open"]
    inside = [r for r in open_rows if r["fee"] * 0.5 <= limit < r["fee"]]  # allowed only through the arithmetic
    outside = [r for r in open_rows if r["fee"] * 0.5 > limit]
    assert inside or outside
    with world.episode() as ep:
        for r in inside:
            assert ep.call("grant_credit", {"request_id": r["id"]}).ok
        for r in outside:
            res = ep.call("grant_credit", {"request_id": r["id"]})
            assert not res.ok and "exceeds the service credit limit" in (res.error or "")

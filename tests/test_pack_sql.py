"""Every piece of pack SQL runs confined by the authorizer and bounded, hand-written and drafted alike;
row counts, lists and strings in packs are bounded (issue 35, criterion 4). Each test plants the payload
the outside test used and checks it is refused with the file, the field and the bound."""

from __future__ import annotations

import json
import resource
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory import packsql
from worldfactory.generate import data
from worldfactory.packs import check_files
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import TemplateError, load_templates


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children: a bound on work that a loaded machine cannot trip."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


WORLD = SMALL[0]  # help-desk.small--v001
INVARIANT = '"SELECT count(*) FROM requests WHERE credit > fee + 0.005"'
CROSS7 = "SELECT count(*) FROM requests a, requests b, requests c, requests d, requests e, requests f, requests g"


def _templates(dest: Path, old: str, new: str) -> Path:
    root = small_templates_at(dest)
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    assert old in text
    pack.write_text(text.replace(old, new))
    return root


@pytest.mark.parametrize("sql", ["ATTACH '{planted}' AS x", "VACUUM INTO '{planted}'",
                                 "PRAGMA user_version = 7", "SELECT load_extension('/tmp/x')",
                                 "SELECT length(printf('%.*c', 900000000, 'x'))"])
def test_check_pack_and_build_refuse_what_pack_sql_may_not_do(tmp_path: Path, sql: str) -> None:
    planted = tmp_path / "planted.db"
    root = _templates(tmp_path / "t", INVARIANT, json.dumps(sql.replace("{planted}", str(planted))))
    pack = root / "domains" / "help-desk.yaml"
    lines = check_files([pack], root)
    assert any(f"{pack}: field 'invariants[0].sql': not allowed in pack SQL" in line for line in lines), lines
    with pytest.raises(TemplateError, match=r"help-desk.yaml: field 'invariants\[0\].sql': not allowed"):
        build_world(WORLD, tmp_path / "data", templates=load_templates(root))
    assert not planted.exists()


def test_a_seven_way_cross_join_is_refused_within_seconds(tmp_path: Path) -> None:
    root = _templates(tmp_path / "t", INVARIANT, json.dumps(CROSS7))
    ts = load_templates(root)  # it compiles and the authorizer allows it: only running it costs
    started = cpu_seconds()
    with pytest.raises(Exception, match=r"invariant 'credits stay within the request's fee' \(domains/help-desk"
                                        r".yaml: field 'invariants\[0:credits stay within the request's fee\].sql'"
                                        r"\): ran past 50,000,000 SQLite steps"):
        build_world(WORLD, tmp_path / "data", templates=ts)
    assert cpu_seconds() - started < 30
    assert not (tmp_path / "data" / "worlds" / WORLD).exists()


def test_work_and_length_bounds_of_one_statement() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(60)])
    started = cpu_seconds()
    with pytest.raises(packsql.PackSQLError, match="f.yaml: field 'invariants.0.': ran past 1,000,000"):
        with packsql.bounded(conn, "f.yaml: field 'invariants[0]'", max_steps=1_000_000):
            conn.execute("SELECT count(*) FROM t a, t b, t c, t d, t e").fetchall()
    assert cpu_seconds() - started < 5
    big = "SELECT length(group_concat(hex(a.x || b.x || c.x || 'xxxxxxxxxxxxxxxx'), '')) FROM t a, t b, t c"
    with pytest.raises(packsql.PackSQLError, match="too big.*at most 1,000,000 bytes"):
        packsql.run(conn, big, "invariant", "f.yaml: field 'invariants[0]'")
    assert packsql.run(conn, "SELECT count(*) FROM t WHERE x > 100", "invariant", "here") == [(0,)]


CHAIN = """
  - name: steps
    singular: step
    per_parent: {table: requests, column: request_id, count: [1, 20]}
    columns:
      - {name: request_id, type: integer, ref: requests}
      - {name: note, gen: sentence}
  - name: substeps
    singular: substep
    per_parent: {table: steps, column: step_id, count: [1, 20]}
    columns:
      - {name: step_id, type: integer, ref: steps}
      - {name: note, gen: sentence}
  - name: checks
    singular: check
    per_parent: {table: substeps, column: substep_id, count: [1, 20]}
    columns:
      - {name: substep_id, type: integer, ref: substeps}
      - {name: note, gen: sentence}
"""


def test_a_chain_whose_product_is_huge_is_refused_before_any_row_is_made(tmp_path: Path) -> None:
    """Each level's own count is modest (20 per parent, as drafted packs allow); 40 x 20 x 20 x 20 is not."""
    root = small_templates_at(tmp_path / "t")
    pack = root / "domains" / "help-desk.yaml"
    pack.write_text(pack.read_text().replace("    rows: 40\n", "    rows: 200\n") + CHAIN)
    ts = load_templates(root)
    started = cpu_seconds()
    with pytest.raises(Exception, match=r"table 'checks': field 'per_parent.count' \[1, 20\] gives up to [\d,]+ "
                                        r"rows.*a table has at most 25,000.*a world has at most 60,000"):
        build_world(WORLD, tmp_path / "data", templates=ts)
    assert cpu_seconds() - started < 30


def test_the_world_total_is_bounded_even_when_each_table_is_within_its_own(tmp_path: Path) -> None:
    from worldfactory.briefs import expand_world
    from worldfactory.generate.schema import build_spec

    root = small_templates_at(tmp_path / "t")
    pack = root / "domains" / "help-desk.yaml"
    pack.write_text(pack.read_text().replace("    rows: 40\n", "    rows: 200\n") + CHAIN.replace("[1, 20]", "[1, 4]"))
    ts = load_templates(root)
    spec = build_spec(expand_world(WORLD, ts), ts)
    assert data.row_bound_problems(spec) == []  # about 60 x 4 x 4 x 4 in the deepest table
    checks = spec.table("checks")
    spec.tables += [checks.model_copy(update={"name": f"checks_{i}"}) for i in range(2)]
    spec.brief.scale = 1.6  # 320 requests, 1,280 steps, 5,120 substeps, 3 x 20,480 checks: each within 25,000
    problems = data.row_bound_problems(spec)
    assert len(problems) == 1 and "rows together (largest: checks 20,480, checks_0 20,480" in problems[0], problems
    assert "a world has at most 60,000" in problems[0]


def test_a_200k_value_enum_and_a_huge_string_are_refused_with_file_field_and_bound(tmp_path: Path) -> None:
    values = json.dumps([f"v{i}" for i in range(200_000)])
    root = _templates(tmp_path / "t", "enum: [open, resolved, closed],", f"enum: {values},")
    started = cpu_seconds()
    with pytest.raises(TemplateError, match=r"help-desk.yaml: field 'tables\[0:requests\].columns\[5:status\].enum': "
                                            r"200000 items; at most 1000"):
        load_templates(root)
    assert cpu_seconds() - started < 20
    root = _templates(tmp_path / "u", "label: service credit limit", f"label: {'x' * 100_000}")
    with pytest.raises(TemplateError, match=r"field 'rules\[0:credit_limit\].label': a text of 100000 characters; "
                                            r"at most 4000"):
        load_templates(root)


def test_a_field_with_its_own_max_length_keeps_it() -> None:
    from worldfactory.briefs import TextBrief

    assert len(TextBrief(description="x" * 15_000).description) == 15_000  # a brief's 20,000, not MAX_TEXT

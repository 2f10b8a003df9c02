"""The year-end close-out's scope: "every record" is every record, and a large world's plan stays near
the horizon tasks are made for (year_end.CAP) instead of growing with the world."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES, SMALL
from worldfactory.generate.tasks import year_end
from worldfactory.generate.tasks.builder import SEARCH_MAX, TaskBuilder
from worldfactory.generate.tasks.driver import Plan
from worldfactory.generate.tasks.year_end import ACTIONS, CAP, LONG_TARGET, options, scopes, search_calls
from worldfactory.spec import TableDef, WorldSpec


def anchor_table(small_data: Path) -> TableDef:
    spec = WorldSpec.model_validate_json((small_data / "worlds" / SMALL[0] / "spec.json").read_bytes())
    table = spec.table(spec.anchor)
    assert table.workflow is not None and table.label
    return table


def rows(table: TableDef, counts: dict[str, int]) -> list[dict[str, Any]]:
    """Anchor rows by id, `counts[state]` of each status, ordered by status."""
    column = table.workflow.column  # type: ignore[union-attr]
    states = [s for s, n in counts.items() for _ in range(n)]
    return [{"id": i + 1, column: s, table.label: f"R-{i + 1:05d}"} for i, s in enumerate(sorted(states))]


def test_every_record_is_listed_when_there_are_more_than_a_page(small_data: Path) -> None:
    """The fault this guards against: a plan over the first SEARCH_MAX records of an instruction that
    says "every" (a world with 526 reservations had 500 in its oracle)."""
    table = anchor_table(small_data)
    anchors = rows(table, {"open": 420, "closed": 106})
    every = scopes(table, anchors)[0]
    assert every.state is None and len(every.rows) == 526
    pages = search_calls(table, every)
    assert [c.args.get("offset", 0) for c in pages] == [0, SEARCH_MAX]
    assert all(c.args["limit"] == SEARCH_MAX and c.tool == f"search_{table.name}" for c in pages)
    column = table.workflow.column  # type: ignore[union-attr]
    for scope in scopes(table, anchors)[1:]:  # a status scope: its search filters by the status
        assert {r[column] for r in scope.rows} == {scope.state}
        assert [c.args[column] for c in search_calls(table, scope)] == [scope.state]


def test_a_large_world_gets_a_plan_near_the_target_and_a_small_one_is_unchanged(small_data: Path) -> None:
    table = anchor_table(small_data)
    small = rows(table, {"open": 200, "closed": 80})  # an example world's size: every record, every action
    scope, actions = options(table, small)[0]
    assert scope.state is None and len(scope.rows) == 280 and actions == max(ACTIONS)
    large = rows(table, {"open": 420, "closed": 106})
    scope, actions = options(table, large)[0]
    size = len(search_calls(table, scope)) + actions * len(scope.rows)
    assert size <= CAP  # not 2,106 calls (every record, every action)
    assert size == max(len(search_calls(table, s)) + k * len(s.rows) for s, k in options(table, large)
                       if len(search_calls(table, s)) + k * len(s.rows) <= CAP)
    huge = rows(table, {"open": 900, "closed": 900})  # no option fits: the shortest one comes first
    first = options(table, huge)[0]
    sizes = [len(search_calls(table, s)) + k * len(s.rows) for s, k in options(table, huge)]
    assert sizes[0] == min(sizes) > CAP and first[1] == min(ACTIONS)
    assert LONG_TARGET <= CAP


def close_out(bundle: Path, records: int, archive: bool) -> Plan | None:
    """The close-out a world would get with only its first `records` anchor records, with or without
    the archive transition (a fresh builder each time: the plan draws its auditor from the builder's stream)."""
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    names = {t["name"] for t in json.loads((bundle / "tools.json").read_bytes())}
    b = TaskBuilder(spec, names, (bundle / "seed.db").read_bytes())
    try:
        anchor, anchors, docs, finalize, archived, contacts = year_end.candidates(b).items[0]
        return year_end.plan(b, (anchor, anchors[:records], docs, finalize, archived if archive else None, contacts))
    finally:
        b.close()


def test_a_world_short_of_the_target_archives_each_review_and_one_that_reaches_it_is_unchanged(
        worlds_dir: Path) -> None:
    """The fault this guards against: a world whose records and sweeps give fewer than LONG_TARGET calls
    at four calls a record had no close-out at all (litigation-firm.startup--v002: 132 matters, 987 calls)."""
    bundle = worlds_dir / EXAMPLES[0]
    short = next(n for n in range(20, 400, 10) if close_out(bundle, n, archive=False) is None
                 and close_out(bundle, n, archive=True) is not None)
    made = close_out(bundle, short, archive=True)
    assert made is not None and len(made.oracle) >= LONG_TARGET
    archives = [c for c in made.oracle if c.tool.startswith("archive_") and c.tool.endswith("document")]
    finals = [c for c in made.oracle if c.tool.startswith("finalize_")]
    assert len(archives) == len(finals) == short  # each record's own review, the one just finalized
    assert [c.args for c in archives] == [c.args for c in finals]
    assert ", then archive it" in made.instruction
    enough = close_out(bundle, 400, archive=False)  # every record: four calls each already reach the target
    assert enough is not None and len(enough.oracle) >= LONG_TARGET and "archive it" not in enough.instruction
    assert close_out(bundle, 400, archive=True) == enough  # the whole plan: calls, instruction, target

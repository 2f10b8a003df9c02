"""The validity check's reference comparison (same_state) against planted faults and against the
plain whole-table comparison it shortcuts, and the first difference of a plan from its oracle."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from tests.conftest import EXAMPLES
from worldfactory.generate.validity import (
    SeedStates,
    TableState,
    _first_difference,
    mutants_for,
    reordered,
    same_state,
    table_state,
)
from worldfactory.runtime.episode import Episode
from worldfactory.runtime.world import World
from worldfactory.seeds import stage_rng
from worldfactory.spec import Task, ToolCall


def _replayed(world: World, task: Task, calls: list[ToolCall]) -> Episode:
    ep = world.episode(task.task_id)
    for call in calls:
        ep.call(call.tool, call.args)
    return ep


def _whole(ep: Episode, gold: dict[str, TableState], seed: SeedStates, tables: set[str]) -> bool:
    """The reference as it reads without any shortcut: every table's whole state, both sides at once."""
    return all(table_state(ep, t) == (gold[t] if t in gold else seed(t)) for t in tables & set(ep.world.norm))


def _plain_columns(world: World, table: str) -> list[str]:
    """Columns both sides of the reference compare as stored (no free text, no references)."""
    t = world.norm[table]
    return [c for c in t.columns if c not in t.free_text and c not in t.refs and c not in t.poly]


def _count(ep: Episode, table: str, new: bool) -> int:
    max_id = ep.world.norm[table].seed_max_id
    return ep.conn.execute(f"SELECT count(*) FROM {table} WHERE id {'>' if new else '<='} {max_id}").fetchone()[0]


def _change_a_value(ep: Episode, table: str, new: bool) -> bool:
    """Plant: one row's plain column takes another row's different value (so CHECK constraints hold);
    the row count stays. False if no such change is possible in this table."""
    max_id = ep.world.norm[table].seed_max_id
    where = f"id > {max_id}" if new else f"id <= {max_id}"
    targets = [r[0] for r in ep.conn.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY id DESC LIMIT 5")]
    for column in _plain_columns(ep.world, table):
        for target in targets:
            other = ep.conn.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT "
                                    f"(SELECT {column} FROM {table} WHERE id = ?) AND typeof({column}) <> 'real' "
                                    f"LIMIT 1", (target,)).fetchone()
            if other is None:
                continue
            try:
                ep.conn.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (other[0], target))
            except sqlite3.IntegrityError:
                continue
            return True
    return False


def _delete_a_row(ep: Episode, table: str, new: bool) -> bool:
    max_id = ep.world.norm[table].seed_max_id
    where = f"id > {max_id}" if new else f"id <= {max_id}"
    for (row_id,) in list(ep.conn.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY id DESC")):
        try:
            ep.conn.execute(f"DELETE FROM {table} WHERE id = ?", (row_id,))
        except sqlite3.IntegrityError:  # referenced by another row
            continue
        return True
    return False


@pytest.fixture(scope="module")
def inserting(worlds: dict[str, World]) -> Iterator[tuple[World, Task, dict[str, TableState], str]]:
    """A task whose oracle inserts rows into a table that has seed rows: its world, gold, that table."""
    world = worlds[EXAMPLES[0]]
    for task in world.tasks.values():
        ep = _replayed(world, task, task.oracle)
        try:
            gold = {t: table_state(ep, t) for t in ep.written}
            tables = [t for t in sorted(gold) if gold[t][1] is not None and gold[t][0] is not None
                      and _plain_columns(world, t)]
        finally:
            ep.close()
        if tables:
            yield world, task, gold, tables[0]
            return
    pytest.fail("no task of the example world inserts rows")


@pytest.mark.parametrize("fault", ["seed_value", "new_value", "seed_count", "new_count", "untouched_table"])
def test_a_planted_difference_is_judged_different(
        inserting: tuple[World, Task, dict[str, TableState], str], fault: str) -> None:
    """Equal row counts must still reach the full comparison (a changed value); a changed count, a
    changed table the oracle never wrote, and the new rows' side are each caught."""
    world, task, gold, table = inserting
    seed = SeedStates(world)
    ep = _replayed(world, task, task.oracle)
    try:
        tables = set(gold)
        assert same_state(ep, gold, seed, tables) and _whole(ep, gold, seed, tables)  # gold equals itself
        if fault == "untouched_table":
            table = next(t for t in sorted(world.norm, key=lambda t: -world.norm[t].seed_max_id)
                         if t not in gold and _plain_columns(world, t))
            tables.add(table)
        new = fault.startswith("new")
        counts = (_count(ep, table, new=False), _count(ep, table, new=True))
        if fault.endswith("count"):
            assert _delete_a_row(ep, table, new), f"no row of {table} can be deleted"
            assert (_count(ep, table, new=False), _count(ep, table, new=True)) != counts
        else:
            assert _change_a_value(ep, table, new), f"no value of {table} can be changed"
            assert (_count(ep, table, new=False), _count(ep, table, new=True)) == counts  # only a value differs
        assert not _whole(ep, gold, seed, tables)
        assert not same_state(ep, gold, seed, tables)
    finally:
        ep.close()


@pytest.mark.parametrize("wid", EXAMPLES)
def test_same_state_answers_as_the_whole_table_comparison(worlds: dict[str, World], wid: str) -> None:
    """Every mutant and reordered plan of the first tasks: same_state (new rows first, then seed rows)
    gives the answer of comparing every table whole; both answers occur."""
    world = worlds[wid]
    rng = stage_rng(world.brief.generation_seed, "validity")
    seed = SeedStates(world)
    answers = []
    for task in list(world.tasks.values())[:25]:
        ep = _replayed(world, task, task.oracle)
        gold = {t: table_state(ep, t) for t in ep.written}
        ep.close()
        swapped = reordered(world, task)
        plans = [m.calls for m in mutants_for(world, task, rng)] + ([swapped] if swapped is not None else [])
        for calls in plans:
            ep = _replayed(world, task, calls)
            try:
                tables = ep.written | set(gold)
                answer = same_state(ep, gold, seed, tables)
                assert answer == _whole(ep, gold, seed, tables), (task.task_id, calls)
                answers.append(answer)
            finally:
                ep.close()
    assert True in answers and False in answers


def test_first_difference_compares_tool_and_arguments() -> None:
    plan = [ToolCall(tool="a", args={"x": 1}), ToolCall(tool="b", args={"y": [1, 2]}), ToolCall(tool="c", args={})]
    copy = [ToolCall(tool=c.tool, args=dict(c.args)) for c in plan]  # equal, not the same objects
    assert _first_difference(copy, plan) == 3
    assert _first_difference(plan[:2], plan) == 2
    assert _first_difference([*plan, plan[0]], plan) == 3
    assert _first_difference([plan[0], ToolCall(tool="b", args={"y": [1, 3]}), plan[2]], plan) == 1
    assert _first_difference([plan[0], ToolCall(tool="x", args={"y": [1, 2]})], plan) == 1
    assert _first_difference([], plan) == 0

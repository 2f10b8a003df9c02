"""bulk: act on every record in one state that belongs to one parent record (3 to BULK_MAX calls)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from ..workflow import guards_hold, id_param, render_verb
from .builder import SEARCH_MAX, TaskBuilder
from .driver import Plan, Pools
from .words import cap, in_state, of_parent

FAMILY = "bulk"
QUOTA = 16
TRIES = 3
PHRASES = ["{Verb}.", "Please {verb}.", "Clean up: {verb}."]
BULK_MIN = 3
BULK_MAX = 40


def candidates(b: TaskBuilder) -> Pools:
    """Per (transition, parent reference): the groups of rows in one state under one parent, by parent id."""
    pools: list[list[Any]] = []
    for table, tr in b.uniform_transitions():
        for col in b.parent_refs(table):
            pool = []
            for state in tr.from_:
                groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
                for row in b.rows_in(table, [state]):
                    if row[col.name] is not None:
                        groups[row[col.name]].append(row)
                for pid, rows in sorted(groups.items()):
                    if BULK_MIN <= len(rows) <= BULK_MAX:
                        pool.append((table, tr, col, state, pid, rows))
            pools.append(pool)
    return Pools(pools)


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    table, tr, col, state, pid, rows = candidate
    args = b.task_args(tr, rows[0])
    if not all(guards_hold(tr, r, args, b.rules, b.today) for r in rows):
        return None
    parent_table = b.spec.table(col.ref or "")
    parent = b.row(parent_table, pid)
    assert parent is not None
    paddr = b.address(parent_table, parent)
    if paddr is None:
        return None
    assert table.workflow is not None
    said = b.said_args(tr, args)
    if said is None:
        return None
    obj = f"every {in_state(table.singular, state)} {of_parent(col, parent_table, paddr.text)}"
    verb = render_verb(tr, obj, said[0])
    search = ToolCall(tool=f"search_{table.name}",
                      args={col.name: pid, table.workflow.column: state, "limit": SEARCH_MAX})
    oracle = paddr.lookup + [search] + said[1] + [
        ToolCall(tool=tr.name, args={id_param(table): r["id"], **args}) for r in rows]
    return Plan(fill(b.rng.choice(PHRASES), Verb=cap(verb), verb=verb), oracle, table.name)

"""coverage: after every family has drawn its quota, one more task for each write tool (a workflow
step, a create or an update tool) that no task uses yet, so that a rich pack's later steps are not
lost to fixed quotas. Steps and updates become lookup_act tasks (find the record, act on it);
creates become workflow tasks (add a record, saying every value it needs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import TableDef, ToolCall

from ..workflow import guards_hold
from . import lookup_act
from .builder import TaskBuilder
from .driver import Plan
from .words import cap, tool_name

TRIES = 8  # candidates tried per uncovered tool
CREATE_PHRASES = ["Add a new {thing}: {said}.", "Please record a new {thing} with {said}.",
                  "Set up a new {thing} ({said})."]


def write_tools(b: TaskBuilder) -> list[tuple[str, str, TableDef, Any]]:
    """Every tool of the world that writes, in spec order: (tool, kind, table, transition or None)."""
    out: list[tuple[str, str, TableDef, Any]] = []
    for table in b.spec.tables:
        for tr in table.workflow.transitions if table.workflow else []:
            if tr.name in b.tools:
                out.append((tr.name, "transition", table, tr))
        for kind in ("create", "update"):
            name = tool_name(table, kind)
            if name in b.tools:
                out.append((name, kind, table, None))
    return out


def used_tools(b: TaskBuilder) -> set[str]:
    return {call.tool for task in b.tasks for call in task.oracle}


def run(b: TaskBuilder) -> int:
    """Add a task for every write tool no task uses yet (when one can be planned); the number added."""
    used = used_tools(b)
    added = 0
    for name, kind, table, tr in write_tools(b):
        if name in used:
            continue
        for family, plan in _plans(b, kind, table, tr):
            if plan is not None and b.add(family, plan.instruction, plan.oracle, plan.target, plan.answer,
                                          plan.answer_type, asked=plan.asked):
                used |= {call.tool for call in plan.oracle}
                added += 1
                break
    return added


def _plans(b: TaskBuilder, kind: str, table: TableDef, tr: Any) -> Iterator[tuple[str, Plan | None]]:
    """Up to TRIES planned candidates for one tool, drawn from the builder's stream."""
    if kind == "create":
        for _ in range(TRIES):
            yield "workflow", _create_plan(b, table)
        return
    if kind == "transition":
        rows = [("transition", table, tr, row, args) for row, args in b.transition_rows(table, tr, tr.from_)
                if guards_hold(tr, row, args, b.rules, b.today)]
    else:
        rows = [("update", table, None, row, None) for row in b.rows(table)]
    b.rng.shuffle(rows)
    for candidate in rows[:TRIES]:
        yield lookup_act.FAMILY, lookup_act.plan(b, candidate)


def _create_plan(b: TaskBuilder, table: TableDef) -> Plan | None:
    made = b.create_args(table, {}, f"new {table.singular}")
    if made is None:
        return None
    args, said, lookups = made
    if not said:
        return None
    text = fill(b.rng.choice(CREATE_PHRASES), thing=table.singular, said=", ".join(said))
    return Plan(cap(text), [*lookups, ToolCall(tool=tool_name(table, "create"), args=args)], table.name)

"""Workflow helpers shared by tool probes and task generation: guards, task values, phrasing."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from worldfactory.expressions import RELATED, evaluate, is_expression, references, related_key
from worldfactory.fill import fill
from worldfactory.runtime.toolkit import COMPARE
from worldfactory.spec import Guard, Param, TableDef, Transition

TODAY = "$today"  # a guard's value that is the world's clock: `row.due_on < $today`
FREE_TEXT_CHOICES = [
    "Documentation does not support the request",
    "Duplicate of an earlier record",
    "Customer withdrew the request",
    "Outside the scope of the agreement",
    "Resolved after review with the team",
    "Counterparty did not respond in time",
]


def slug(text: str) -> str:
    return text.lower().replace(" ", "_").replace("-", "_")


def id_param(table: TableDef) -> str:
    return f"{slug(table.singular)}_id"


def related_reads(t: TableDef) -> list[tuple[str, str]]:
    """The (ref column, column) pairs that the guards of the table's steps read from related records
    (`ref.<column>.<name>`), in order of first use."""
    out: list[tuple[str, str]] = []
    for tr in t.workflow.transitions if t.workflow else []:
        for g in tr.guards:
            for kind, name in references(g.field) if is_expression(g.field) else []:
                column, _, field = name.partition(".")
                if kind == RELATED and (column, field) not in out:
                    out.append((column, field))
    return out


def with_related(conn: sqlite3.Connection, tables: dict[str, TableDef], t: TableDef,
                 rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, each with the related values its table's guards read (under `related_key`), as the generated
    tool reads them from the related record: task generation then judges a guard as the tool will."""
    for column, field in related_reads(t):
        target = tables.get(t.column(column).ref or "") if column in {c.name for c in t.columns} else None
        if target is None or field not in {c.name for c in target.columns}:
            continue  # check-pack names it; the tool generator refuses it
        values = dict(conn.execute(f"SELECT id, {field} FROM {target.name}").fetchall())
        for row in rows:
            row[related_key(column, field)] = values.get(row.get(column))
    return rows


def task_value(param: Param, row: dict[str, Any], rng: random.Random) -> Any:
    """The value a task passes for a transition parameter."""
    source = param.task_value or "choice"
    if source.startswith("row."):
        value = row[source[4:]]
        return round(float(value), 2) if param.type in ("money", "number") else value
    if param.enum:
        return rng.choice(param.enum)
    if param.free_text or param.type == "text":
        return rng.choice(FREE_TEXT_CHOICES)
    raise ValueError(f"parameter '{param.name}' needs a task_value")


def _side(guard: Guard, row: dict[str, Any], args: dict[str, Any], rules: dict[str, float],
          today: str | None) -> tuple[Any, Any]:
    if is_expression(guard.field):
        left: Any = evaluate(guard.field, row, args)
    else:
        kind, name = guard.field.split(".", 1)
        left = row[name] if kind == "row" else args.get(name)
    if guard.rule is not None:
        right: Any = rules[guard.rule]
    elif isinstance(guard.value, str) and guard.value.startswith("row."):
        right = row[guard.value[4:]]
    elif guard.value == TODAY:  # the world's clock, as the generated tool reads it (db.today)
        right = today
    else:
        right = guard.value
    return left, right


def guard_holds(guard: Guard, row: dict[str, Any], args: dict[str, Any], rules: dict[str, float],
                today: str | None = None) -> bool:
    """Whether the guard holds; one that compares with $today never holds without the world's clock."""
    left, right = _side(guard, row, args, rules, today)
    return left is not None and right is not None and COMPARE[guard.op](left, right)


def guards_hold(t: Transition, row: dict[str, Any], args: dict[str, Any], rules: dict[str, float],
                today: str | None = None) -> bool:
    return all(guard_holds(g, row, args, rules, today) for g in t.guards)


def say_value(param: Param, value: Any) -> str:
    if param.type == "money":
        return f"${float(value):,.2f}"
    if param.enum:
        return str(value).replace("_", " ").upper() if len(str(value)) <= 4 else str(value).replace("_", " ")
    return str(value)


def render_verb(t: Transition, obj: str, args: dict[str, Any]) -> str:
    values = {p.name: say_value(p, args[p.name]) for p in t.params if p.name in args}
    return fill(t.verb, **{**values, "obj": obj})

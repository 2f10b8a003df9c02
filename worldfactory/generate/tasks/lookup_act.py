"""lookup_act: find a record as a person names it, then act on it (a transition or an update),
sometimes emailing a contact after."""

from __future__ import annotations

from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import TableDef, ToolCall

from ..workflow import guards_hold, id_param, render_verb
from .builder import TaskBuilder
from .driver import Plan, Pools
from .words import cap, human, tool_name

FAMILY = "lookup_act"
QUOTA = 24
TRIES = 3
PHRASES = ["{Verb}.", "Please {verb}.", "We need to {verb}.", "Could you {verb}?", "Go ahead and {verb}."]
CHANGE = "change the {field} of {obj} to {value}"
NOTIFY_SHARE = 0.6  # of these tasks also email a contact


def candidates(b: TaskBuilder) -> Pools:
    """One pool per transition (rows whose guards hold), one per updatable table (every row)."""
    pools: list[list[Any]] = []
    for table, tr in b.transitions():
        pools.append([("transition", table, tr, row, args) for row, args in b.transition_rows(table, tr, tr.from_)
                      if guards_hold(tr, row, args, b.rules)])
    for table in b.spec.tables:
        if table.update and tool_name(table, "update") in b.tools and table.label:
            pools.append([("update", table, None, row, None) for row in b.rows(table)])
    return Pools(pools)


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    kind, table, tr, row, args = candidate
    addr = b.address(table, row)
    if addr is None:
        return None
    if kind == "transition":
        said = b.said_args(tr, args)
        if said is None:
            return None
        verb = render_verb(tr, addr.text, said[0])
        call = ToolCall(tool=tr.name, args={id_param(table): row["id"], **args})
        oracle = addr.lookup + b.getter(table, row) + said[1] + [call]
    else:
        change = _update_change(b, table, row)
        if change is None:
            return None
        template, words, extra, call_args = change
        call = ToolCall(tool=tool_name(table, "update"), args={id_param(table): row["id"], **call_args})
        verb = fill(template, obj=addr.text, **words)
        oracle = addr.lookup + b.getter(table, row) + extra + [call]
    if b.rng.random() < NOTIFY_SHARE:
        told = b.notify(table, row, "done", addr.text)
        if told is not None:
            verb, oracle = f"{verb}, then {told[0]}", oracle + told[1]
    phrase = b.rng.choice(PHRASES)
    return Plan(fill(phrase, Verb=cap(verb), verb=verb), oracle, table.name)


def _update_change(b: TaskBuilder, table: TableDef, row: dict[str, Any]
                   ) -> tuple[str, dict[str, str], list[ToolCall], dict[str, Any]] | None:
    """A change to one updatable column: the verb's template (``{obj}`` and the words it names, filled in
    one pass, so pack text in the words is never read as a placeholder), the lookups it needs, the arguments."""
    col = table.column(b.rng.choice(table.update))
    if col.enum:
        options = [v for v in col.enum if v != row[col.name]]
        value: Any = b.rng.choice(options)
        return CHANGE, {"field": col.human, "value": human(value)}, [], {col.name: value}
    if col.ref:
        target = b.spec.table(col.ref)
        if not (target.label and target.label in target.search):
            return None
        others = b.rows_except(target, row[col.name])
        if not others:
            return None
        other = b.rng.choice(others)
        lookup = ToolCall(tool=f"search_{target.name}", args={target.label: other[target.label]})
        words = {"thing": target.singular, "name": other[target.label], "field": col.human}
        return "make {thing} {name} the {field} of {obj}", words, [lookup], {col.name: other["id"]}
    if col.type in ("money", "number") and row[col.name] is not None:
        value = round(float(row[col.name]) * b.rng.choice([0.8, 0.9, 1.1, 1.25]), 2)
        said = f"${value:,.2f}" if col.type == "money" else f"{value:g}"
        return CHANGE, {"field": col.human, "value": said}, [], {col.name: value}
    if col.type == "integer" and row[col.name] is not None:
        step = max(1, round(abs(int(row[col.name])) * b.rng.choice([0.1, 0.2, 0.25])))
        value = int(row[col.name]) + b.rng.choice([-step, step])
        if col.minimum is not None and value < col.minimum:
            value = int(row[col.name]) + step
        return CHANGE, {"field": col.human, "value": value}, [], {col.name: value}
    if col.type == "text" and not col.free_text:
        text = b.drawn_text(table, col, dict(row))
        if text is None or text == row[col.name]:
            return None
        return CHANGE, {"field": col.human, "value": text}, [], {col.name: text}
    return None

"""lookup_act: find a record as a person names it, then act on it (a transition or an update),
sometimes emailing a contact after."""

from __future__ import annotations

from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from ..workflow import guards_hold, id_param, render_verb
from .builder import TaskBuilder
from .driver import Plan, Pools
from .words import cap, tool_name

FAMILY = "lookup_act"
QUOTA = 24
TRIES = 3
PHRASES = ["{Verb}.", "Please {verb}.", "We need to {verb}.", "Could you {verb}?", "Go ahead and {verb}."]
NOTIFY_SHARE = 0.6  # of these tasks also email a contact


def candidates(b: TaskBuilder) -> Pools:
    """One pool per transition (rows whose guards hold), one per updatable table (every row)."""
    pools: list[list[Any]] = []
    for table, tr in b.transitions():
        pools.append([("transition", table, tr, row, args) for row, args in b.transition_rows(table, tr, tr.from_)
                      if guards_hold(tr, row, args, b.rules, b.today)])
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
        change = b.update_change(table, row)
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

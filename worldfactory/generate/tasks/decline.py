"""decline: a request a business rule forbids. The oracle reads the record and the rule and changes
nothing; the answer names the rule (graded by its name, label or id, and no other rule)."""

from __future__ import annotations

from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from ..workflow import guards_hold, id_param, render_verb
from .builder import TaskBuilder
from .driver import Plan, Pools
from .words import cap, tool_name

FAMILY = "decline"
QUOTA = 8
TRIES = 3
PHRASES = [  # each says what the answer is: the one business rule in the way, by its name, label or id
    "{Verb}. If a company rule does not allow it, do not do it and name the business rule that stops it.",
    "Please {verb}, unless our rules forbid it; in that case leave it as it is and name the business rule.",
    "{Verb} if policy allows. If it does not, change nothing and name the business rule in the way.",
]


def candidates(b: TaskBuilder) -> Pools:
    """Per rule-guarded transition of a readable table: the rows that only a rule stops, with that rule's guard."""
    pools: list[list[Any]] = []
    for table, tr in b.transitions():
        rule_guards = [g for g in tr.guards if g.rule]
        if not rule_guards or tool_name(table, "get") not in b.tools:
            continue
        others = tr.model_copy(update={"guards": [g for g in tr.guards if not g.rule]})
        pool = []
        for row, args in b.transition_rows(table, tr, tr.from_):
            failing = [g for g in rule_guards
                       if not guards_hold(tr.model_copy(update={"guards": [g]}), row, args, b.rules, b.today)]
            if failing and guards_hold(others, row, args, b.rules, b.today):
                pool.append((table, tr, row, args, failing[0]))
        pools.append(pool)
    return Pools(pools)


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    table, tr, row, args, guard = candidate
    addr = b.address(table, row)
    if addr is None:
        return None
    rule = next(r for r in b.spec.rules if r.name == guard.rule)
    said = b.said_args(tr, args)  # the refused step is not taken: the record it names need not be looked up
    if said is None:
        return None
    verb = render_verb(tr, addr.text, said[0])
    oracle = [*addr.lookup, *b.getter(table, row), ToolCall(tool="search_business_rules", args={"name": rule.name})]
    text = fill(b.rng.choice(PHRASES), Verb=cap(verb), verb=verb)
    asked = [ToolCall(tool=tr.name, args={id_param(table): row["id"], **args})]  # refused by a rule, not the clock
    return Plan(text, oracle, table.name, answer=rule.name, answer_type="reason", asked=asked)

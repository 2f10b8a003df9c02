"""conditional: check a business rule on a record, then take one of two actions (the transition
the rule guards, or its ``otherwise``), and email a contact about the decision."""

from __future__ import annotations

from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from ..workflow import guards_hold, id_param, render_verb
from .builder import TaskBuilder
from .driver import Plan, Pools, refusal_weights
from .words import cap

FAMILY = "conditional"
QUOTA = 16
TRIES = 3
PHRASES = [
    "Check {obj}: if {says}, {a}; otherwise {b}.",
    "Handle {obj}. If {says}, {a}. If not, {b}.",
    "Review {obj} against our rules: when {says}, {a}; when it is not, {b}.",
]


def candidates(b: TaskBuilder) -> Pools:
    """Per rule-guarded transition with an alternative: a pool of rows that pass, one of rows that fail (drawn
    ``brief.refusals`` times as often: a world targeted at ignored rules asks mostly for what a rule refuses)."""
    pools: list[list[Any]] = []
    by_name = {tr.name: (t, tr) for t, tr in b.transitions()}
    for table, tr in b.transitions():
        if not tr.otherwise or tr.otherwise not in by_name:
            continue
        if not any(g.rule for g in tr.guards):
            continue
        _, alt = by_name[tr.otherwise]
        states = [s for s in tr.from_ if s in alt.from_]
        yes, no = [], []
        others = tr.model_copy(update={"guards": [g for g in tr.guards if not g.rule]})
        for row, args in b.transition_rows(table, tr, states):
            if not guards_hold(others, row, args, b.rules, b.today):
                continue  # the instruction states the rule only: no other guard may decide the branch
            if b.in_handbook_band(tr, row, args):
                continue  # the handbook's near-limit exception decides otherwise: the handbook family's case
            (yes if guards_hold(tr, row, args, b.rules, b.today) else no).append((table, tr, alt, row, args))
        pools += [yes, no]
    return Pools(pools, refusal_weights(b, [False, True] * (len(pools) // 2)))


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    table, tr, alt, row, args = candidate
    addr = b.address(table, row)
    if addr is None:
        return None
    alt_args = b.task_args(alt, row)
    guard = next(g for g in tr.guards if g.rule)
    says = guard.says or "the rule allows it"
    said, alt_said = b.said_args(tr, args), b.said_args(alt, alt_args)
    if said is None or alt_said is None:
        return None
    taken = guards_hold(tr, row, args, b.rules, b.today)
    chosen, chosen_args, lookups = (tr, args, said[1]) if taken else (alt, alt_args, alt_said[1])
    text = fill(b.rng.choice(PHRASES), obj=addr.text, says=says,
                a=render_verb(tr, "it", said[0]), b=render_verb(alt, "it", alt_said[0]))
    oracle = addr.lookup + b.getter(table, row) + [
        ToolCall(tool="search_business_rules", args={"name": guard.rule}),
        *lookups,
        ToolCall(tool=chosen.name, args={id_param(table): row["id"], **chosen_args}),
    ]
    told = b.notify(table, row, "decision made", addr.text)
    if told is not None:
        text, oracle = f"{text.rstrip('.')}. Then {told[0]}.", oracle + told[1]
    other, other_args = (alt, alt_args) if taken else (tr, args)  # the branch not taken is asked for too
    asked = [ToolCall(tool=other.name, args={id_param(table): row["id"], **other_args})]
    return Plan(cap(text), oracle, table.name, asked=asked)

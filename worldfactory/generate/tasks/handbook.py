"""handbook: a decision the policy handbook governs, where two or more of its rules interact.

The instruction asks for a step "unless our handbook says otherwise". The handbook section for the step's
rule (generate/handbook.py) decides: past the limit the tool refuses and the alternative is taken; just
inside the limit the tool allows the step, but the handbook's exception forbids it, so the alternative is
taken and the rule's reviewer is emailed (the escalation path); well inside, the step is taken. Candidates
are drawn from all three, so a policy that obeys only the tools' refusals passes some and fails the rest.
``Task.trap`` of a near-limit task is the step the tools allow.
"""

from __future__ import annotations

from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from ..handbook import TABLE, HandbookRule, handbook_rules, in_band
from ..workflow import guards_hold, id_param, render_verb
from .builder import TaskBuilder
from .driver import Plan, Pools, refusal_weights
from .words import cap

FAMILY = "handbook"
QUOTA = 8
TRIES = 3
PHRASES = [
    "{Obj} is ready for a decision: {step}, unless our policy handbook says otherwise; if it does, follow it.",
    "Please {step}, as long as our policy handbook allows it. If it does not, do what the handbook says instead.",
    "Decide {obj} under our policy handbook: {step} if the handbook allows it; otherwise follow the handbook.",
]
BODY = "Applied the near-limit exception of the handbook; sent for your review."


def candidates(b: TaskBuilder) -> Pools:
    """Three pools: rows the exception covers (the tool allows, the handbook forbids), rows well inside the
    limit, and rows past it (the two where the step is refused drawn ``brief.refusals`` times as often)."""
    if f"search_{TABLE}" not in b.tools:
        return Pools([])
    near: list[Any] = []
    inside: list[Any] = []
    past: list[Any] = []
    for hr in handbook_rules(b.spec, b.conn):
        if hr.step.name not in b.tools or hr.alternative.name not in b.tools or hr.alternative.params:
            continue  # the handbook names the alternative without values: it must need none
        others = hr.step.model_copy(update={"guards": [g for g in hr.step.guards if not g.rule]})
        states = [s for s in hr.step.from_ if s in hr.alternative.from_]
        for row, args in b.transition_rows(hr.table, hr.step, states):
            if not guards_hold(others, row, args, b.rules, b.today):
                continue  # another guard decides: not the handbook's case
            if in_band(hr, row, args, b.rules):
                near.append((hr, row, args, "near"))
            elif guards_hold(hr.step, row, args, b.rules, b.today):
                inside.append((hr, row, args, "inside"))
            else:
                past.append((hr, row, args, "past"))
    return Pools([near, inside, past], refusal_weights(b, [True, False, True]))


def plan(b: TaskBuilder, candidate: tuple[HandbookRule, dict[str, Any], dict[str, Any], str]) -> Plan | None:
    hr, row, args, case = candidate
    table = hr.table
    addr = b.address(table, row)
    if addr is None:
        return None
    alt_args = b.task_args(hr.alternative, row)
    if not guards_hold(hr.alternative, row, alt_args, b.rules, b.today):
        return None
    said, alt_said = b.said_args(hr.step, args), b.said_args(hr.alternative, alt_args)
    if said is None or alt_said is None:
        return None
    step = ToolCall(tool=hr.step.name, args={id_param(table): row["id"], **args})
    alt = ToolCall(tool=hr.alternative.name, args={id_param(table): row["id"], **alt_args})
    reads = addr.lookup + b.getter(table, row) + [
        ToolCall(tool=f"search_{TABLE}", args={"topic": hr.rule}),
        ToolCall(tool="search_business_rules", args={"name": hr.rule}),
    ]
    trap: list[ToolCall] = []
    rules = 2  # the rule and its exception decide together
    if case == "inside":
        oracle = reads + said[1] + [step]
    elif case == "past":
        oracle = reads + alt_said[1] + [alt]
    else:
        escalation = _escalation(b, hr, row)
        if escalation is None:
            return None
        oracle = reads + alt_said[1] + [alt] + escalation
        trap = reads + said[1] + [step]
        rules = 3  # and the escalation path
    phrase = b.rng.choice(PHRASES)
    named = "{Obj}" in phrase or "{obj}" in phrase  # the record is named before the step: the step says "it"
    text = fill(phrase, Obj=cap(addr.text), obj=addr.text, step=render_verb(hr.step, "it" if named else addr.text,
                                                                             said[0]))
    return Plan(cap(text), oracle, table.name, trap=trap, rules=rules)


def _escalation(b: TaskBuilder, hr: HandbookRule, row: dict[str, Any]) -> list[ToolCall] | None:
    """Find the reviewer and email them with the handbook's subject."""
    if hr.reviewer_id is None or "create_email" not in b.tools or not b.has_table("users"):
        return None
    users = b.spec.table("users")
    reviewer = b.row(users, hr.reviewer_id)
    if reviewer is None or not reviewer.get("email"):
        return None
    find = [ToolCall(tool="search_users", args={"full_name": reviewer["full_name"]})] + b.getter(users, reviewer)
    email = ToolCall(tool="create_email", args={"subject": hr.subject(row), "body": BODY,
                                                 "to_address": reviewer["email"]})
    return find + [email]

"""ask: the instruction leaves out a fact the requester knows, and the agent must ask for it
(`ask_requester(topic)`, requester.py). Three kinds:

- which: the request names a parent with two records the step could apply to ("the claim of policy
  POL-000123"); the requester means the one a search lists second, so taking the first hit is wrong;
- amount: the step needs an amount, and the requester's is not the one the record suggests (the
  claimed amount): acting on the record's own value is wrong;
- choice: the step needs one of a few options, and the requester's is not the first option.

What a guesser does is kept as the task's declined_calls: the mutant `guess` runs it in place of the
oracle's step and the verifier must fail it. The family draws from its own stream, so no other task moves.
"""

from __future__ import annotations

import random
import re
from typing import Any

from worldfactory.fill import fill
from worldfactory.requester import ASK_TOOL
from worldfactory.seeds import stage_rng
from worldfactory.spec import Param, TableDef, ToolCall, Transition, has_name

from ..workflow import guards_hold, id_param, say_value, task_value
from .builder import TaskBuilder
from .driver import Plan, Stream
from .words import WH_NOUNS, cap, human, of_parent, param_noun, unit_after

FAMILY = "ask"
QUOTA = 8
TRIES = 4
FRACTIONS = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9)  # of the record's own amount: what the requester asks for


def _human(p: Param) -> str:
    return param_noun(p.name, p.description)


def _steps(b: TaskBuilder) -> list[tuple[TableDef, Transition]]:
    """Transitions with a tool on named tables that name no other record, the anchor's first."""
    out = [(t, tr) for t, tr in b.transitions() if has_name(t) and not any(p.ref for p in tr.params)]
    return sorted(out, key=lambda x: x[0].name != b.spec.anchor)


def _which(b: TaskBuilder, rng: random.Random) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for table, tr in _steps(b):
        if any((p.task_value or "choice").startswith("row.") for p in tr.params):
            continue  # a value read from the record would tell the twins apart
        for col in b.parent_refs(table):
            by_parent: dict[Any, list[dict[str, Any]]] = {}
            for row in b.rows_in(table, tr.from_):
                if row[col.name] is not None:
                    by_parent.setdefault(row[col.name], []).append(row)
            for pid in sorted(by_parent):
                rows = by_parent[pid][:2]
                if len(by_parent[pid]) != 2:
                    continue  # exactly two: the requester's answer settles it
                args = {p.name: task_value(p, rows[1], rng) for p in tr.params}
                if all(guards_hold(tr, r, args, b.rules, b.today) for r in rows):
                    out.append(("which", table, tr, col, pid, rows, args))
    return out


def _valued(b: TaskBuilder, rng: random.Random) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for table, tr in _steps(b):
        for p in tr.params:
            numeric = p.type in ("money", "number") and (p.task_value or "").startswith("row.")
            if not (numeric or (p.enum and len(p.enum) > 1)) or not _readable(tr, p):
                continue
            for row in b.rows_in(table, tr.from_):
                args = {q.name: task_value(q, row, rng) for q in tr.params}
                guess = dict(args)
                if numeric:
                    guess[p.name] = task_value(p, row, rng)
                    args[p.name] = round(float(guess[p.name]) * rng.choice(FRACTIONS), 2)
                    if args[p.name] == guess[p.name]:
                        continue
                else:
                    assert p.enum is not None
                    guess[p.name] = p.enum[0]
                    args[p.name] = rng.choice(p.enum[1:])
                if guards_hold(tr, row, args, b.rules, b.today):
                    out.append(("amount" if numeric else "choice", table, tr, p, row, args, guess))
    return out


def _readable(tr: Transition, p: Param) -> bool:
    """Whether the step reads well with the parameter left for the requester to give: its slot follows a
    preposition ("for {amount}", "by {method}") or the verb does not say it at all."""
    slot = "{" + p.name + "}"
    return slot not in tr.verb or re.search(r"\b(for|by|to|with|at|as|in|on)\s+" + re.escape(slot), tr.verb) is not None


def candidates(b: TaskBuilder) -> Stream:
    """Every candidate of the three kinds, interleaved after a shuffle of each (the family's own stream)."""
    if not b.has_table(b.spec.anchor):
        return Stream([], shuffle=False)
    rng = stage_rng(b.spec.brief.generation_seed, "ask")
    kinds = [_which(b, rng), *_split(_valued(b, rng))]
    for pool in kinds:
        rng.shuffle(pool)
    mixed: list[tuple[Any, ...]] = []
    while any(kinds):
        for pool in kinds:
            if pool:
                mixed.append(pool.pop())
    return Stream(mixed, shuffle=False)


def _split(valued: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    return [[c for c in valued if c[0] == "amount"], [c for c in valued if c[0] == "choice"]]


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    if ASK_TOOL in b.tools:
        return None  # a world whose own tool is called so: the requester cannot be reached
    return _plan_which(b, candidate) if candidate[0] == "which" else _plan_valued(b, candidate)


def _said(tr: Transition, args: dict[str, Any], obj: str, hidden: Param | None = None, placeholder: str = "") -> str:
    values = {p.name: placeholder if p is hidden else say_value(p, args[p.name]) for p in tr.params}
    return fill(tr.verb, **{**values, "obj": obj})


def _plan_which(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    _, table, tr, col, pid, rows, args = candidate
    parent_table = b.spec.table(col.ref or "")
    parent = b.row(parent_table, pid)
    if parent is None or not has_name(parent_table) or parent[parent_table.label or ""] is None:
        return None
    plabel = parent[parent_table.label or ""]
    wrong, right = rows
    topic = f"which_{table.singular.replace(' ', '_')}"
    link = of_parent(col, parent_table, f"{parent_table.singular} {plabel}")
    obj = f"the {table.singular} {link}"
    plural = table.plural_name.replace("_", " ")
    text = (f"{cap(_said(tr, args, obj))}. Two {plural} {link} are in a state where this can be done; ask the "
            f"requester which one they mean before you act.")
    act = ToolCall(tool=tr.name, args={id_param(table): right["id"], **args})
    oracle = [ToolCall(tool=f"search_{parent_table.name}", args={parent_table.label or "": plabel}),
              ToolCall(tool=f"search_{table.name}", args={col.name: pid}),
              ToolCall(tool=ASK_TOOL, args={"topic": topic}),
              *b.getter(table, right), act]
    fact = f"I mean {table.singular} {right[table.label or '']}."
    guess = ToolCall(tool=tr.name, args={id_param(table): wrong["id"], **args})
    return Plan(text, oracle, table.name, requester={topic: fact}, declined_calls=[guess])


def _plan_valued(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    kind, table, tr, p, row, args, guess = candidate
    label = row[table.label or ""]
    if label is None:
        return None
    topic = p.name
    unit = unit_after(tr.verb, p.name, p.name)  # "for {hours_worked} hours": the unit goes with the slot
    noun = "amount" if p.type == "money" else f"number of {unit}" if unit and kind == "amount" else _human(p)
    # a noun made of a wh-clause is said by the parameter's name where the requester's choice fills it
    # ("terminate employee E00028 for the reason the requester wants", not "for the reason employment ends the
    # requester wants"; "record the final payment by the method the requester wants", not "by the way ...")
    clause = noun.split()[0] in WH_NOUNS.values() and len(noun.split()) > 2
    head = p.name.removesuffix("_id").replace("_", " ") if clause else noun
    placeholder = f"the {noun} the requester gives you" if kind == "amount" else f"the {head} the requester wants"
    obj = f"{table.singular} {label}"
    verb = tr.verb.replace("{" + p.name + "} " + unit, "{" + p.name + "}") if unit else tr.verb
    if "{" + p.name + "}" not in tr.verb:
        text = f"{cap(_said(tr, args, obj, p, ''))}, with {placeholder}; ask them for it."
    else:  # the slot follows a preposition (_readable)
        text = f"{cap(_said(tr.model_copy(update={'verb': verb}), args, obj, p, placeholder))}; ask them for it."
    value = args[p.name]
    if kind == "amount":
        fact = f"The {noun}: {say_value(p, value)}."
    else:  # an option as words, and the value the tool takes (found blind: "... is deadline_at_risk.")
        said = human(value)
        fact = f"The {_human(p)}: {said}" + ("." if said == str(value) else f" (pass it as \"{value}\").")
    oracle = [ToolCall(tool=f"search_{table.name}", args={table.label or "": label}), *b.getter(table, row),
              ToolCall(tool=ASK_TOOL, args={"topic": topic}),
              ToolCall(tool=tr.name, args={id_param(table): row["id"], **args})]
    wrong = ToolCall(tool=tr.name, args={id_param(table): row["id"], **guess})
    return Plan(text, oracle, table.name, requester={topic: fact}, declined_calls=[wrong])

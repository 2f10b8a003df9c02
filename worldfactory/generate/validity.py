"""Verifier validity: every task's grader is tried against plans that must fail and plans that must pass.

Beside the mutants, each oracle gives alternatives that are valid by construction and must pass
(completeness, not only soundness): an extra read, an email to a contact that also gives the contact's
own address, independent writes in another order, an optional field given the default it gets anyway,
and the answer in another order, number format, date spelling, case, or the rule by its
label or id. They replay from the oracle's checkpoints as mutants do; one that fails fails the world.

For each task: the oracle must score 1; doing nothing must score 0; mutants of the oracle plan
(drop a write, change an argument, act on the wrong record, add a destructive call, give a
wrong answer) must score 0 unless their end state equals gold; the oracle with two independent
writes swapped must still score 1. "Equals gold" is decided by a reference comparison written
separately from the verifier: the full rows of every written table, with the declared
normalisation (surrogate keys of new rows, free text that only has to exist), and the answer.
A verifier that passes a mutant the reference says differs is weak: the task is dropped.
"""

from __future__ import annotations

import json
import random
import weakref
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from worldfactory.generate.careless import careless_plans
from worldfactory.runtime.answers import answers_match
from worldfactory.runtime.diff import TableNorm
from worldfactory.runtime.episode import Episode, Verdict
from worldfactory.runtime.world import World
from worldfactory.seeds import stage_rng
from worldfactory.spec import Task, ToolCall

Verify = Callable[[Episode, Any], Verdict]
MUTANT_KINDS = ("drop_step", "change_argument", "wrong_record", "destructive_call", "wrong_answer", "trap", "guess",
                "ignore_decline")
LONG_PLAN = 20


class Mutant(BaseModel):
    kind: str
    note: str
    calls: list[ToolCall]
    answer: Any = None


class AlternativeOutcome(BaseModel):
    kind: str
    note: str
    passed: bool  # a valid solution: the verifier must pass it


class MutantOutcome(BaseModel):
    kind: str
    note: str
    equivalent: bool  # its end state and answer equal gold: the verifier must pass it
    passed: bool  # what the verifier said


class TaskValidity(BaseModel):
    task_id: str
    family: str
    oracle_steps: int
    oracle_passes: bool
    null_fails: bool
    reorder_passes: bool | None = None  # None: no two independent writes to swap
    mutants: list[MutantOutcome] = Field(default_factory=list)
    alternatives: list[AlternativeOutcome] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def unfair(self) -> list[str]:
        """The valid alternatives its verifier fails: a too-strict grader fails the world, not only the task."""
        return [f"{a.kind} ({a.note})" for a in self.alternatives if not a.passed]

    def counts(self) -> dict[str, int]:
        equivalent = sum(m.equivalent for m in self.mutants)
        caught = sum(not m.equivalent and not m.passed for m in self.mutants)
        missed = sum(not m.equivalent and m.passed for m in self.mutants)
        return {"mutants": len(self.mutants), "equivalent": equivalent, "caught": caught, "missed": missed}


def _ref_ref(norm: dict[str, TableNorm], column: str, target: str) -> str:
    new = f"typeof({column}) = 'integer' AND {column} > {norm[target].seed_max_id}"
    return f"CASE WHEN {new} THEN 'new' ELSE {column} END"


def _ref_exprs(norm: dict[str, TableNorm], table: str, new_rows: bool) -> list[str]:
    """Each column as the reference compares it, in SQL. Seed rows: free text as present or not,
    references to rows created in the episode as 'new'. New rows also: polymorphic references, and
    reals to the cent."""
    t = norm[table]
    exprs = []
    for c in t.columns:
        if c in t.free_text:
            exprs.append(f"CASE WHEN {c} IS NULL THEN NULL ELSE trim({c}) <> '' END")
        elif c in t.refs and t.refs[c] in norm:
            exprs.append(_ref_ref(norm, c, t.refs[c]))
        elif new_rows and c in t.poly:
            arms = " ".join(f"WHEN '{target}' THEN {_ref_ref(norm, c, target)}" for target in sorted(norm))
            exprs.append(f"CASE {t.poly[c]} {arms} ELSE {c} END")
        elif new_rows:
            exprs.append(f"CASE WHEN typeof({c}) = 'real' THEN round({c}, 2) ELSE {c} END")
        else:
            exprs.append(c)
    return exprs


TableState = tuple[str | None, str | None]
_QUERIES: weakref.WeakKeyDictionary[World, dict[str, tuple[str, str]]] = weakref.WeakKeyDictionary()


def _state_queries(world: World, table: str) -> tuple[str, str]:
    """The two statements of table_state for one table, built once per world."""
    cache = _QUERIES.setdefault(world, {})
    queries = cache.get(table)
    if queries is None:
        norm = world.norm
        max_id = norm[table].seed_max_id
        seed_cols = " || ',' || ".join(f"quote({e})" for e in ["id", *_ref_exprs(norm, table, new_rows=False)])
        new_cols = " || ',' || ".join(f"quote({e})" for e in _ref_exprs(norm, table, new_rows=True))
        queries = cache[table] = (
            f"SELECT group_concat(r, char(10)) FROM (SELECT {seed_cols} AS r FROM main.{table} "
            f"WHERE id <= {max_id} ORDER BY id)",
            f"SELECT group_concat(r, char(10)) FROM (SELECT {new_cols} AS r FROM main.{table} "
            f"WHERE id > {max_id} ORDER BY r)")
    return queries


def table_state(ep: Episode, table: str) -> TableState:
    """One table as the reference compares it: seed rows whole and by id, new rows as a sorted
    multiset without their surrogate keys; each side one string that SQLite builds.

    Read with whole-table queries, independent of the verifier's diff and its change log.
    """
    seed_sql, new_sql = _state_queries(ep.world, table)
    return ep.conn.execute(seed_sql).fetchone()[0], ep.conn.execute(new_sql).fetchone()[0]


def same_state(ep: Episode, gold: dict[str, TableState], seed: Callable[[str], TableState], tables: set[str]) -> bool:
    """Reference equality of the episode's end state and gold's over the given tables.

    `gold` has gold's state of every table the oracle changed; any other table is as in the seed.
    The answer is the conjunction of every table's two sides, so they are read cheapest first: the
    new rows of every table (a seek past the seed's ids; most mutants that differ, differ there), then
    the seed rows (a scan of the whole table) only if all new rows agree. Counting the seed rows before
    scanning them would spare nothing: in the three example worlds no mutant differs from gold in its
    seed rows' count without differing in its new rows.
    """
    norm = ep.world.norm
    # Smallest seed first: the answer is only equal or not, and a differing small table spares reading the rest.
    order = sorted(tables & set(norm), key=lambda t: (norm[t].seed_max_id, t))
    for side in (1, 0):  # TableState is (seed rows, new rows)
        for table in order:
            ref = gold[table] if table in gold else seed(table)
            if ep.conn.execute(_state_queries(ep.world, table)[side]).fetchone()[0] != ref[side]:
                return False
    return True


class SeedStates:
    """The reference's view of the seed, per table, read once per world."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.states: dict[str, TableState] = {}

    def __call__(self, table: str) -> TableState:
        if table not in self.states:
            with self.world.episode() as ep:
                self.states[table] = table_state(ep, table)
        return self.states[table]


class OracleRun:
    """The oracle replayed once on one episode, with a checkpoint before every step a mutant changes.

    Mutants rewind to the checkpoint where they part from the oracle and replay only their tail.
    A rewind discards the checkpoints after it, so plans are run from the latest checkpoint back.
    """

    def __init__(self, world: World, task: Task, cut_points: set[int], verify: Verify | None) -> None:
        self.world, self.task, self.verify = world, task, verify
        self.cuts = sorted(cut_points | {0, len(task.oracle)})
        self.ep = world.episode(task.task_id)
        for i, call in enumerate(task.oracle):
            if i in cut_points or i == 0:
                self.ep.checkpoint(str(i))
            self.ep.call(call.tool, call.args)
        self.ep.checkpoint(str(len(task.oracle)))
        self.written = self.ep.written
        self.gold = {table: table_state(self.ep, table) for table in sorted(self.written)}
        self.verdict = self._verify(task.answer)

    def _verify(self, answer: Any) -> Verdict:
        return self.verify(self.ep, answer) if self.verify else self.ep.verify(answer, explain=False)

    def base(self, start: int) -> int:
        """The latest checkpoint at or before `start`, the first step where a plan parts from the oracle."""
        return max(i for i in self.cuts if i <= start)

    def run(self, calls: list[ToolCall], start: int, answer: Any,
            seed: Callable[[str], TableState]) -> tuple[Verdict, bool]:
        """Replay `calls` from the checkpoint before `start` (their first difference from the oracle):
        the verdict, and whether the end state equals gold."""
        base = self.base(start)
        self.ep.rewind(str(base))
        for call in calls[base:]:
            self.ep.call(call.tool, call.args)
        verdict = self._verify(answer)
        if start == len(calls) == len(self.task.oracle):  # the oracle itself: gold's own state
            return verdict, True
        return verdict, same_state(self.ep, self.gold, seed, self.ep.written | self.written)

    def close(self) -> None:
        self.ep.close()


def _is_write(world: World, call: ToolCall) -> bool:
    spec = world.tools_by_name.get(call.tool)  # ask_requester is the episode's, not the world's: a read
    return spec is not None and not spec["annotations"]["read_only_hint"]


def _id_arg(world: World, call: ToolCall) -> str | None:
    required = world.tools_by_name[call.tool]["input_schema"].get("required", [])
    return next((a for a in required if a.endswith("_id") and isinstance(call.args.get(a), int)), None)


def _other_value(schema: dict[str, Any], value: Any, rng: random.Random) -> Any:
    if "enum" in schema:
        options = [v for v in schema["enum"] if v != value]
        return rng.choice(options) if options else None
    if schema.get("type") == "number" and isinstance(value, int | float):
        return round(float(value) * 0.5 + 1.0, 2)
    if schema.get("type") == "integer" and isinstance(value, int):
        return value + 1
    if schema.get("type") == "string" and isinstance(value, str):
        return value + " (revised)"
    return None


def _wrong_answer(task: Task) -> Any:
    a = task.answer
    if task.answer_type == "int":
        return int(a) + 1
    if task.answer_type == "number":
        return round(float(a) + 1.0, 2)
    if task.answer_type == "list":
        return list(a)[1:] if len(a) > 1 else [*a, "someone else"]
    if task.answer_type == "reason":
        return "no rule applies here"
    return f"not {a}"


def mutants_for(world: World, task: Task, rng: random.Random) -> list[Mutant]:
    """The mutants of one oracle plan: each a plan a careless agent could plausibly produce."""
    plan = task.oracle
    writes = [i for i, c in enumerate(plan) if _is_write(world, c)]
    long = len(plan) > LONG_PLAN
    out: list[Mutant] = []
    # Long plans are mutated near their end, so a mutant replays from the oracle's state at that point.
    for i in sorted({*writes[-2:], *(writes[:1] if not long else [])}):
        out.append(Mutant(kind="drop_step", note=f"drop step {i} ({plan[i].tool})",
                          calls=plan[:i] + plan[i + 1:], answer=task.answer))
    for i in sorted({*writes[-1:], *(writes[:1] if not long else [])}):
        call = plan[i]
        props = world.tools_by_name[call.tool]["input_schema"]["properties"]
        id_arg = _id_arg(world, call)
        names = sorted(a for a in call.args if a != id_arg and a in props)
        for name in names[:1]:
            value = _other_value(props[name], call.args[name], rng)
            if value is not None:
                changed = ToolCall(tool=call.tool, args={**call.args, name: value})
                out.append(Mutant(kind="change_argument", note=f"step {i}: {name}={value!r}",
                                  calls=plan[:i] + [changed] + plan[i + 1:], answer=task.answer))
        if id_arg:
            other = call.args[id_arg] + 1 if call.args[id_arg] > 1 else 2
            wrong = ToolCall(tool=call.tool, args={**call.args, id_arg: other})
            out.append(Mutant(kind="wrong_record", note=f"step {i}: {id_arg}={other}",
                              calls=plan[:i] + [wrong] + plan[i + 1:], answer=task.answer))
    destructive = sorted(t["name"] for t in world.tool_manifest
                         if t["annotations"]["destructive_hint"] and (t.get("examples") or {}).get("valid"))
    if destructive:
        name = rng.choice(destructive)
        extra = ToolCall(tool=name, args=world.tools_by_name[name]["examples"]["valid"])
        out.append(Mutant(kind="destructive_call", note=f"add {name}({extra.args})", calls=[*plan, extra],
                          answer=task.answer))
    if task.trap:  # the plan that falls for the task's trap: the wrong twin, or what only the tools allow
        out.append(Mutant(kind="trap", note=f"the trap ({len(task.trap)} calls)", calls=list(task.trap),
                          answer=task.answer))
    for kind, note, calls in careless_plans(task):  # the hard tier: acting on a guess, ignoring a decline
        out.append(Mutant(kind=kind, note=note, calls=calls, answer=task.answer))
    if task.answer is not None:
        wrong = _wrong_answer(task)
        out.append(Mutant(kind="wrong_answer", note=f"answer {wrong!r}", calls=list(plan), answer=wrong))
        if task.answer_type in ("int", "number"):  # a hedge names the right value and a wrong one: it states none
            hedge = f"{task.answer} or {wrong}"
            out.append(Mutant(kind="wrong_answer", note=f"answer {hedge!r}", calls=list(plan), answer=hedge))
    if task.answer_type == "reason":  # a decline names one rule: another rule, or every rule, is wrong
        mine = next((set(r.label.split()) for r in world.rule_refs if r.name == task.answer), set())
        others = sorted((r for r in world.rule_refs if r.name != task.answer),  # the likeliest to be confused first
                        key=lambda r: (-len(mine & set(r.label.split())), r.name))
        if others:
            for wrong in (others[0].label, "; ".join(r.name for r in world.rule_refs)):
                out.append(Mutant(kind="wrong_answer", note=f"answer {wrong!r}", calls=list(plan), answer=wrong))
    return out


def _answer_variants(world: World, task: Task) -> list[tuple[str, Any]]:
    """The expected answer as other valid answers say it: another order, format or name."""
    a, kind = task.answer, task.answer_type
    if a is None:
        return []
    if kind == "list" and isinstance(a, list) and len(a) > 1:
        return [("list_order", list(reversed(a)))]
    if kind == "number":  # a sentence names the record and the day as well; only the amount is the answer
        said = f"${float(a):,.2f}"
        return [("number_format", said),
                ("answer_sentence", f"The total is {said} (record REF-000{int(a) % 997 + 2}, {world.clock}).")]
    if kind == "int":
        return [("number_format", f"{int(a)}."),
                ("answer_sentence", f"There are {int(a)} of them on record REF-000{int(a) + 2} as of {world.clock}.")]
    if kind == "date":
        from datetime import date

        day = date.fromisoformat(str(a))
        return [("date_format", f"{day:%B} {day.day}, {day.year}")]
    if kind == "reason":
        rule = next((r for r in world.rule_refs if r.name == a), None)
        return [] if rule is None else [("rule_named", rule.label), ("rule_named", rule.id)]
    if kind == "text":
        return [("text_case", str(a).upper())]
    return []


def alternatives_for(world: World, task: Task) -> list[Mutant]:
    """Valid solutions other than the oracle that a fair verifier passes: an extra read, a recipient given
    both ways (a contact with their own address), an optional field of a create or update given its default,
    and the answer said another way. (Independent writes in another order: `reordered`, checked beside.)"""
    plan = task.oracle
    out: list[Mutant] = []
    reads = [c for c in plan if world.tools_by_name.get(c.tool, {}).get("kind") in ("get", "search")]
    if reads:
        out.append(Mutant(kind="extra_read", note=f"read again: {reads[0].tool}", calls=[*plan, reads[0]],
                          answer=task.answer))
    norm = world.norm.get("contacts")
    at_email = 1 + norm.columns.index("email") if norm is not None and "email" in norm.columns else None
    contacts = world.seed_rows("contacts") if at_email is not None else {}
    long = len(plan) > LONG_PLAN  # a long plan's are made near its end, as its mutants are: a short tail replays
    wrote = next((i for i, c in enumerate(plan)  # after the plan writes contacts, an address may not be the seed's
                  if _is_write(world, c) and world.tools_by_name[c.tool].get("table") == "contacts"), len(plan))
    emails = [i for i, c in enumerate(plan[:wrote]) if c.tool == "create_email"
              and c.args.get("contact_id") in contacts and c.args.get("to_address") is None]
    if emails and at_email is not None:
        i = emails[-1] if long else emails[0]
        call, address = plan[i], contacts[plan[i].args["contact_id"]][at_email]
        both = ToolCall(tool=call.tool, args={**call.args, "to_address": address})
        out.append(Mutant(kind="recipient_fields", note=f"step {i}: contact_id and the contact's own address",
                          calls=plan[:i] + [both] + plan[i + 1:], answer=task.answer))
        alone = ToolCall(tool=call.tool, args={**{k: v for k, v in call.args.items() if k != "contact_id"},
                                               "to_address": address})
        if sum(1 for row in contacts.values() if row[at_email] == address) == 1:  # the address names one contact
            out.append(Mutant(kind="recipient_fields", note=f"step {i}: the contact's own address alone",
                              calls=plan[:i] + [alone] + plan[i + 1:], answer=task.answer))
    for i, call in enumerate(plan):
        filled = defaults_given(world, call) if not long or i >= len(plan) - 2 else None
        if filled is not None:
            out.append(Mutant(kind="optional_default", note=f"step {i}: {call.tool} given {sorted(filled)} explicitly",
                              calls=plan[:i] + [ToolCall(tool=call.tool, args={**call.args, **filled})] + plan[i + 1:],
                              answer=task.answer))
    for kind, answer in _answer_variants(world, task):
        out.append(Mutant(kind=kind, note=f"answer {answer!r}", calls=list(plan), answer=answer))
    return out


def defaults_given(world: World, call: ToolCall) -> dict[str, Any] | None:
    """A create or update call's optional parameters it leaves out, each with the default tools.json declares:
    the value the tool would use anyway, so passing it explicitly is the same solution. None if there are none."""
    tool = world.tools_by_name.get(call.tool, {})
    if tool.get("kind") not in ("create", "update"):
        return None
    schema = tool["input_schema"]
    required = set(schema.get("required", []))
    filled = {name: p["default"] for name, p in sorted(schema["properties"].items())
              if name not in required and name not in call.args and "default" in p}
    return filled or None


def reordered(world: World, task: Task) -> list[ToolCall] | None:
    """The plan with its last two adjacent writes on different records swapped, if there are any."""
    plan = task.oracle
    for i in reversed(range(len(plan) - 1)):
        a, b = plan[i], plan[i + 1]
        if _is_write(world, a) and _is_write(world, b) and (a.tool, a.args) != (b.tool, b.args):
            ia, ib = _id_arg(world, a), _id_arg(world, b)
            same_table = world.tools_by_name[a.tool].get("table") == world.tools_by_name[b.tool].get("table")
            if ia and ib and same_table and a.args[ia] != b.args[ib]:
                return plan[:i] + [b, a] + plan[i + 2:]
    return None


def _first_difference(calls: list[ToolCall], plan: list[ToolCall]) -> int:
    """The first step where `calls` part from `plan`. Mutants share the oracle's call objects, so
    identity settles most steps; otherwise (tool, args) as ToolCall's own equality compares them."""
    i = 0
    while i < len(calls) and i < len(plan) and (
            calls[i] is plan[i] or (calls[i].tool, calls[i].args) == (plan[i].tool, plan[i].args)):
        i += 1
    return i


def check_task(world: World, task: Task, rng: random.Random, verify: Verify | None = None,
               seed: Callable[[str], TableState] | None = None) -> TaskValidity:
    seed = seed or SeedStates(world)
    mutants = mutants_for(world, task, rng)
    alternatives = alternatives_for(world, task)
    swapped = reordered(world, task)
    plans = [(m.calls, m.answer) for m in mutants] + ([(swapped, task.answer)] if swapped is not None else [])
    plans += [(a.calls, a.answer) for a in alternatives]
    starts = [_first_difference(calls, task.oracle) for calls, _ in plans]
    null_ep = world.episode(task.task_id)
    null = verify(null_ep, None) if verify else null_ep.verify(None, explain=False)
    null_ep.close()
    run = OracleRun(world, task, set(starts), verify)
    try:
        report = TaskValidity(task_id=task.task_id, family=task.family, oracle_steps=len(task.oracle),
                              oracle_passes=run.verdict.passed, null_fails=not null.passed)
        if not run.verdict.passed:
            report.problems.append("the oracle does not pass")
        if null.passed:
            report.problems.append("doing nothing passes")
        results: dict[int, tuple[Verdict, bool]] = {}
        for i in sorted(range(len(plans)), key=lambda i: -run.base(starts[i])):  # latest checkpoint first
            results[i] = run.run(plans[i][0], starts[i], plans[i][1], seed)
    finally:
        run.close()
    for i, m in enumerate(mutants):
        verdict, equal = results[i]
        same_answer = task.answer is None or answers_match(task.answer, m.answer, task.answer_type, world.rule_refs)
        outcome = MutantOutcome(kind=m.kind, note=m.note, equivalent=equal and same_answer, passed=verdict.passed)
        report.mutants.append(outcome)
        if outcome.passed and not outcome.equivalent:
            report.problems.append(f"mutant passes but differs from gold: {m.kind} ({m.note})")
        if outcome.equivalent and not outcome.passed:
            report.problems.append(f"mutant equals gold but fails: {m.kind} ({m.note})")
    if swapped is not None:
        verdict, equal = results[len(mutants)]
        if equal:  # independent writes in another order: a valid alternative of its own, counted with the rest
            report.reorder_passes = verdict.passed
            report.alternatives.append(AlternativeOutcome(kind="write_order", note="the last two independent writes "
                                                          "swapped", passed=verdict.passed))
            if not verdict.passed:
                report.problems.append("the oracle with independent steps reordered fails")
    first = len(mutants) + (swapped is not None)
    for i, alt in enumerate(alternatives):  # valid by construction: the verifier must pass every one
        verdict, _ = results[first + i]
        report.alternatives.append(AlternativeOutcome(kind=alt.kind, note=alt.note, passed=verdict.passed))
    return report


def check_world(world: World, tasks: list[Task] | None = None, verify: Verify | None = None) -> list[TaskValidity]:
    rng = stage_rng(world.brief.generation_seed, "validity")
    seed = SeedStates(world)
    todo = tasks if tasks is not None else list(world.tasks.values())
    return [check_task(world, t, rng, verify, seed) for t in todo]


def summary(reports: list[TaskValidity]) -> dict[str, Any]:
    totals = {"mutants": 0, "equivalent": 0, "caught": 0, "missed": 0}
    for r in reports:
        for k, v in r.counts().items():
            totals[k] += v
    judged = totals["caught"] + totals["missed"]
    return {
        "tasks": len(reports),
        "valid": sum(r.valid for r in reports),
        "dropped": sum(not r.valid for r in reports),
        **totals,
        "caught_rate": round(totals["caught"] / judged, 4) if judged else 1.0,
        "reordered_checked": sum(r.reorder_passes is not None for r in reports),
        "reordered_pass": sum(bool(r.reorder_passes) for r in reports),
        "alternatives": sum(len(r.alternatives) for r in reports),
        "alternatives_passed": sum(a.passed for r in reports for a in r.alternatives),
    }


def report_jsonl(reports: list[TaskValidity]) -> str:
    lines = []
    for r in reports:
        row = r.model_dump()
        row["mutant_results"] = row.pop("mutants")
        row.update(r.counts())
        row["valid"] = r.valid
        row["unfair"] = r.unfair
        lines.append(json.dumps(row, sort_keys=True, default=str))
    return "".join(line + "\n" for line in lines)

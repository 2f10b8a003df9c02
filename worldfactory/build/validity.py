"""Verifier validity: every task's grader is tried against plans that must fail and plans that must pass.

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
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from worldfactory.runtime.answers import answers_match
from worldfactory.runtime.diff import TableNorm
from worldfactory.runtime.episode import Episode, Verdict
from worldfactory.runtime.world import World
from worldfactory.seeds import stage_rng
from worldfactory.spec import Task, ToolCall

Verify = Callable[[Episode, Any], Verdict]
MUTANT_KINDS = ("drop_step", "change_argument", "wrong_record", "destructive_call", "wrong_answer")
LONG_PLAN = 20


class Mutant(BaseModel):
    kind: str
    note: str
    calls: list[ToolCall]
    answer: Any = None


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
    problems: list[str] = Field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def counts(self) -> dict[str, int]:
        equivalent = sum(m.equivalent for m in self.mutants)
        caught = sum(not m.equivalent and not m.passed for m in self.mutants)
        missed = sum(not m.equivalent and m.passed for m in self.mutants)
        return {"mutants": len(self.mutants), "equivalent": equivalent, "caught": caught, "missed": missed}


def _ref_value(norm: dict[str, TableNorm], t: TableNorm, row: dict[str, Any], col: str) -> Any:
    value = row[col]
    if value is None:
        return None
    if col in t.free_text:
        return bool(str(value).strip())
    target = t.refs.get(col) or (row.get(t.poly[col]) if col in t.poly else None)
    if target in norm and isinstance(value, int) and value > norm[target].seed_max_id:
        return ("new", target)
    return round(value, 2) if isinstance(value, float) else value


def _seed_row_sql(norm: dict[str, TableNorm], table: str, schema: str) -> str:
    t = norm[table]
    exprs = ["id"]
    for c in t.columns:
        if c in t.free_text:
            exprs.append(f"(coalesce(trim({c}), '') <> '')")
        elif c in t.refs and t.refs[c] in norm:
            exprs.append(f"CASE WHEN {c} > {norm[t.refs[c]].seed_max_id} THEN -1 ELSE {c} END")
        else:
            exprs.append(c)
    return f"SELECT {', '.join(exprs)} FROM {schema}.{table} WHERE id <= {t.seed_max_id}"


def _new_rows(conn: Any, norm: dict[str, TableNorm], table: str, schema: str) -> list[tuple[Any, ...]]:
    t = norm[table]
    cols = ["id", *t.columns]
    rows = []
    for raw in conn.execute(f"SELECT {', '.join(cols)} FROM {schema}.{table} WHERE id > {t.seed_max_id}"):
        row = dict(zip(cols, raw, strict=True))
        rows.append(tuple(_ref_value(norm, t, row, c) for c in t.columns))
    return sorted(rows, key=repr)


def same_state(ep: Episode, gold_image: bytes, tables: set[str]) -> bool:
    """Reference equality of the episode's end state and gold's, over the given tables.

    Seed rows are compared whole (free text as present or not, references to new rows as 'new'),
    new rows as a multiset without their surrogate keys. Independent of the verifier's diff.
    """
    norm = ep.world.norm
    with ep.attached("gold", gold_image) as conn:
        for table in sorted(tables & set(norm)):
            mine, gold = _seed_row_sql(norm, table, "main"), _seed_row_sql(norm, table, "gold")
            if conn.execute(f"SELECT 1 FROM ({mine} EXCEPT {gold}) LIMIT 1").fetchone():
                return False
            if conn.execute(f"SELECT 1 FROM ({gold} EXCEPT {mine}) LIMIT 1").fetchone():
                return False
            if _new_rows(conn, norm, table, "main") != _new_rows(conn, norm, table, "gold"):
                return False
    return True


class OracleRun:
    """The oracle replayed once, with the database image before every step that a mutant changes."""

    def __init__(self, world: World, task: Task, cut_points: set[int], verify: Verify | None) -> None:
        self.world, self.task, self.verify = world, task, verify
        self.images: dict[int, bytes] = {}
        ep = world.episode(task.task_id)
        for i, call in enumerate(task.oracle):
            if i in cut_points:
                self.images[i] = ep.snapshot()
            ep.call(call.tool, call.args)
        self.written = set(ep.written)  # a superset of what any prefix wrote
        self.gold_image = ep.snapshot()
        self.images[len(task.oracle)] = self.gold_image
        self.verdict = verify(ep, task.answer) if verify else ep.verify(task.answer)
        ep.close()

    def run(self, calls: list[ToolCall], answer: Any) -> tuple[Verdict, set[str], Episode]:
        """Replay `calls`, starting from the oracle's image at the first step where they differ."""
        plan = self.task.oracle
        start = 0
        while start < len(calls) and start < len(plan) and calls[start] == plan[start]:
            start += 1
        base = max((i for i in self.images if i <= start), default=None)
        ep = self.world.episode(self.task.task_id)
        if base:
            ep.restore(self.images[base], self.written)
        for call in calls[base or 0:]:
            ep.call(call.tool, call.args)
        verdict = self.verify(ep, answer) if self.verify else ep.verify(answer)
        return verdict, set(ep.written), ep


def _is_write(world: World, call: ToolCall) -> bool:
    return not world.tools_by_name[call.tool]["annotations"]["read_only_hint"]


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
    if task.answer is not None:
        wrong = _wrong_answer(task)
        out.append(Mutant(kind="wrong_answer", note=f"answer {wrong!r}", calls=list(plan), answer=wrong))
    return out


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
    i = 0
    while i < len(calls) and i < len(plan) and calls[i] == plan[i]:
        i += 1
    return i


def check_task(world: World, task: Task, rng: random.Random, verify: Verify | None = None) -> TaskValidity:
    mutants = mutants_for(world, task, rng)
    swapped = reordered(world, task)
    cuts = {_first_difference(m.calls, task.oracle) for m in mutants}
    if swapped is not None:
        cuts.add(_first_difference(swapped, task.oracle))
    run = OracleRun(world, task, cuts, verify)
    oracle, oracle_tables, gold_image = run.verdict, run.written, run.gold_image
    null_ep = world.episode(task.task_id)
    null = verify(null_ep, None) if verify else null_ep.verify(None)
    null_ep.close()
    report = TaskValidity(task_id=task.task_id, family=task.family, oracle_steps=len(task.oracle),
                          oracle_passes=oracle.passed, null_fails=not null.passed)
    if not oracle.passed:
        report.problems.append("the oracle does not pass")
    if null.passed:
        report.problems.append("doing nothing passes")
    for m in mutants:
        verdict, tables, ep = run.run(m.calls, m.answer)
        equal = same_state(ep, gold_image, tables | oracle_tables)
        ep.close()
        same_answer = task.answer is None or answers_match(task.answer, m.answer, task.answer_type)
        outcome = MutantOutcome(kind=m.kind, note=m.note, equivalent=equal and same_answer,
                                passed=verdict.passed)
        report.mutants.append(outcome)
        if outcome.passed and not outcome.equivalent:
            report.problems.append(f"mutant passes but differs from gold: {m.kind} ({m.note})")
        if outcome.equivalent and not outcome.passed:
            report.problems.append(f"mutant equals gold but fails: {m.kind} ({m.note})")
    if swapped is not None:
        verdict, tables, ep = run.run(swapped, task.answer)
        if same_state(ep, gold_image, tables | oracle_tables):
            report.reorder_passes = verdict.passed
            if not verdict.passed:
                report.problems.append("the oracle with independent steps reordered fails")
        ep.close()
    return report


def check_world(world: World, tasks: list[Task] | None = None, verify: Verify | None = None) -> list[TaskValidity]:
    rng = stage_rng(world.brief.generation_seed, "validity")
    return [check_task(world, t, rng, verify) for t in (tasks if tasks is not None else list(world.tasks.values()))]


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
    }


def report_jsonl(reports: list[TaskValidity]) -> str:
    lines = []
    for r in reports:
        row = r.model_dump()
        row["mutant_results"] = row.pop("mutants")
        row.update(r.counts())
        row["valid"] = r.valid
        lines.append(json.dumps(row, sort_keys=True, default=str))
    return "".join(line + "\n" for line in lines)

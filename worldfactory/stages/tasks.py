"""world_tasks: tasks with oracle plans, each accepted only if its oracle runs cleanly and leaves an end state
the realism audit passes (worldfactory/audit.py: the clock, the order of records, the tables' constraints,
the pack's invariants)."""

from __future__ import annotations

import json
from collections import Counter

from worldfactory.generate.gold import run_oracle
from worldfactory.generate.tasks import generate_tasks
from worldfactory.generate.verifiers import VerifierError
from worldfactory.safe_text import json_line
from worldfactory.spec import Task
from worldfactory.stages.core import BuildContext, Stage, StageError


def make_tasks(ctx: BuildContext) -> dict[str, int]:
    spec = ctx.spec(STAGE.name)
    names = {t["name"] for t in json.loads(ctx.work.read("tools.json", STAGE.name))}
    world = ctx.world(STAGE)

    refused = 0

    def replays(task: Task) -> bool:
        """A task is only added if its oracle runs cleanly on a fresh seed copy and its end state passes the
        realism audit (a plan that marks done a visit dated ahead of the clock, or that leaves a row breaking
        an invariant of the pack, is not a task)."""
        nonlocal refused
        outcome = run_oracle(world, task, audit=True)
        if outcome.failure:
            return False
        if outcome.audit is not None and outcome.audit.violations:
            refused += 1
            return False
        return True

    tasks = generate_tasks(spec, names, ctx.work.read("seed.db", STAGE.name), replays, ctx.vocabulary)
    ctx.work.write("tasks.jsonl", "".join(json_line(t.model_dump_json()) + "\n" for t in tasks).encode())
    steps = sorted(len(t.oracle) for t in tasks)
    return {"tasks": len(tasks), "families": len({t.family for t in tasks}),
            "oracle_steps_max": steps[-1] if steps else 0, "oracle_steps_total": sum(steps),
            "audit_refused": refused}


def prove_tasks(ctx: BuildContext) -> dict[str, int | float | str]:
    world = ctx.world(STAGE, STAGE.reads + STAGE.writes)
    if not world.tasks:
        raise StageError("the world has no tasks")
    calls = checked = 0
    broken: list[str] = []
    for task in world.tasks.values():  # the run the tasks stage made, when it ran in this process
        outcome = run_oracle(world, task, audit=True)
        if outcome.failure:
            raise VerifierError(f"task {task.task_id}: {outcome.failure}")
        calls += len(task.oracle)
        if outcome.audit is not None:  # the end state's audit, made by the same run (no second replay)
            checked += outcome.audit.checked_rows
            broken += [f"task {task.task_id}: {v.rule}: {v.table} row {v.row}: {v.detail}"
                       for v in outcome.audit.violations]
    if broken:
        raise StageError(f"realism audit of the oracles' end states: {len(broken)} violations, first: "
                         f"{'; '.join(broken[:3])}; a task must leave the world true to its clock, its "
                         f"constraints and its invariants (see worldfactory/audit.py)")
    families = Counter(t.family for t in world.tasks.values())
    return {"tasks": len(world.tasks), "oracle_calls": calls, "oracle_end_violations": 0,
            "oracle_end_checked_rows": checked, **{f"family.{k}": v for k, v in sorted(families.items())}}


STAGE = Stage(
    name="world_tasks",
    check="oracles_run",
    proves=("every oracle plan runs on a fresh seed copy without error and its end state passes the realism "
            "audit (dates against the clock and the order of records, the tables' constraints, the pack's invariants)"),
    make=make_tasks,
    prove=prove_tasks,
    writes=("tasks.jsonl",),
    reads=("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json"),
    confined=("make", "prove"),
)

"""world_tasks: tasks with oracle plans, each accepted only if its oracle runs cleanly."""

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

    def replays(task: Task) -> bool:  # a task is only added if its oracle runs cleanly on a fresh seed copy
        return not run_oracle(world, task).failure

    tasks = generate_tasks(spec, names, ctx.work.read("seed.db", STAGE.name), replays, ctx.vocabulary)
    ctx.work.write("tasks.jsonl", "".join(json_line(t.model_dump_json()) + "\n" for t in tasks).encode())
    steps = sorted(len(t.oracle) for t in tasks)
    return {"tasks": len(tasks), "families": len({t.family for t in tasks}),
            "oracle_steps_max": steps[-1] if steps else 0, "oracle_steps_total": sum(steps)}


def prove_tasks(ctx: BuildContext) -> dict[str, int | float | str]:
    world = ctx.world(STAGE, STAGE.reads + STAGE.writes)
    if not world.tasks:
        raise StageError("the world has no tasks")
    calls = 0
    for task in world.tasks.values():  # the run the tasks stage made, when it ran in this process
        failure = run_oracle(world, task).failure
        if failure:
            raise VerifierError(f"task {task.task_id}: {failure}")
        calls += len(task.oracle)
    families = Counter(t.family for t in world.tasks.values())
    return {"tasks": len(world.tasks), "oracle_calls": calls, **{f"family.{k}": v for k, v in sorted(families.items())}}


STAGE = Stage(
    name="world_tasks",
    check="oracles_run",
    proves=("every oracle plan runs on a fresh seed copy without error"),
    make=make_tasks,
    prove=prove_tasks,
    writes=("tasks.jsonl",),
    reads=("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json"),
    confined=("make", "prove"),
)

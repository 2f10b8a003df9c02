"""curated_tasks: the pass band, the tasks whose pass rate is strictly between 0 and 1."""

from __future__ import annotations

import json

from worldfactory.stages.core import BuildContext, Stage, StageError


def make_curated(ctx: BuildContext) -> dict[str, int]:
    from worldfactory.rollouts import curate

    summary = json.loads(ctx.work.read("rollouts.json", STAGE.name))
    rates = {tid: (p, n) for tid, (p, n) in summary["pass_rates"].items()}
    families = {t.task_id: t.family for t in ctx.tasks(STAGE.name)}
    kept = curate(rates, families)
    ctx.work.write("curated_tasks.jsonl", "".join(json.dumps(row, sort_keys=True) + "\n" for row in kept).encode())
    return {"kept": len(kept), "dropped_all_pass": sum(1 for p, n in rates.values() if p == n),
            "dropped_all_fail": sum(1 for p, _ in rates.values() if p == 0)}


def prove_curated(ctx: BuildContext) -> dict[str, int | float | str]:
    summary = json.loads(ctx.work.read("rollouts.json", STAGE.name))
    lines = ctx.work.read("curated_tasks.jsonl", STAGE.name).decode().splitlines()
    kept = [json.loads(line) for line in lines if line.strip()]
    for row in kept:
        p, n = summary["pass_rates"][row["task_id"]]
        if not 0 < row["pass_rate"] < 1 or row["pass_rate"] != round(p / n, 4) or row["rollouts"] != n:
            raise StageError(f"curated task {row['task_id']} does not match its rollouts")
    expected = sum(1 for p, n in summary["pass_rates"].values() if 0 < p < n)
    if expected != len(kept):
        raise StageError(f"{expected} tasks are in the pass band but {len(kept)} were kept")
    return {"kept": len(kept), "tasks": len(summary["pass_rates"])}


STAGE = Stage(
    name="curated_tasks",
    check="pass_band",
    proves=("the kept tasks are exactly those with a pass rate strictly between 0 and 1"),
    make=make_curated,
    prove=prove_curated,
    writes=("curated_tasks.jsonl",),
    reads=("tasks.jsonl", "rollouts.json"),
)

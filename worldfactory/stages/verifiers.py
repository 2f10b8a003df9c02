"""world_verifiers: gold diffs per task, proved against mutants of every oracle."""

from __future__ import annotations

import json

from worldfactory.generate.validity import check_world, report_jsonl, summary
from worldfactory.generate.verifiers import VerifierError, build_verifiers, check_verifiers, verifiers_json
from worldfactory.stages.core import BuildContext, Stage


def make_verifiers(ctx: BuildContext) -> dict[str, int]:
    world = ctx.world(STAGE)
    verifiers = build_verifiers(world, list(world.tasks.values()))
    world.use_verifiers(json.loads(json.dumps(verifiers, default=str)))  # as verifiers.json will read back
    reports = check_world(world)
    dropped = {r.task_id: r.problems for r in reports if not r.valid}
    if dropped:  # a task whose grader can be fooled is not served
        verifiers["tasks"] = {k: v for k, v in verifiers["tasks"].items() if k not in dropped}
        verifiers["dropped"] = dropped
    verifiers["validity"] = summary(reports)
    ctx.work.write("verifiers.json", verifiers_json(verifiers).encode())
    ctx.work.write("verifier_report.jsonl", report_jsonl(reports).encode())
    v = verifiers["validity"]
    return {"verifiers": len(verifiers["tasks"]), "dropped": len(dropped), "mutants": v["mutants"],
            "mutants_caught": v["caught"], "mutants_equivalent": v["equivalent"], "mutants_missed": v["missed"]}


def prove_verifiers(ctx: BuildContext) -> dict[str, int | float | str]:
    """Oracle 1 and null 0 for every served task, and a validity report that backs every one of them."""
    world = ctx.world(STAGE, STAGE.reads + STAGE.writes)
    details: dict[str, int | float | str] = dict(check_verifiers(world))
    rows = [json.loads(line) for line in world.files["verifier_report.jsonl"].decode().splitlines() if line]
    by_id = {r["task_id"]: r for r in rows}
    for task_id in world.tasks:
        row = by_id.get(task_id)
        if row is None or not row["valid"]:
            raise VerifierError(f"task {task_id} is served but its validity report is missing or failed")
    missed = sum(r["missed"] for r in rows if r["task_id"] in world.tasks)
    if missed:
        raise VerifierError(f"{missed} mutants that differ from gold pass their verifier")
    unfair = [f"{r['task_id']}: {u}" for r in rows for u in r.get("unfair", [])]
    if unfair:  # completeness: a valid solution the verifier fails is an unfair zero
        raise VerifierError(f"{len(unfair)} valid alternative solutions fail their verifier: {'; '.join(unfair[:5])}")
    v = world.verifiers.get("validity", {})
    details.update({"caught_mutant_rate": float(v.get("caught_rate", 0.0)), "mutants": int(v.get("mutants", 0)),
                    "mutants_caught": int(v.get("caught", 0)), "mutants_equivalent": int(v.get("equivalent", 0)),
                    "tasks_dropped": int(v.get("dropped", 0)), "reordered_pass": int(v.get("reordered_pass", 0)),
                    "alternatives": int(v.get("alternatives", 0)),
                    "alternatives_passed": int(v.get("alternatives_passed", 0))})
    return details


STAGE = Stage(
    name="world_verifiers",
    check="verifiers_valid",
    proves=("every oracle scores 1, doing nothing scores 0, every mutant that differs from gold "
            "scores 0, reordered independent steps and every valid alternative solution still score 1"),
    make=make_verifiers,
    prove=prove_verifiers,
    writes=("verifiers.json", "verifier_report.jsonl"),
    reads=("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json", "tasks.jsonl"),
    confined=("make", "prove"),
)

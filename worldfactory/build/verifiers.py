"""Stage 6: verifiers. Replay each oracle on fresh state to get its gold end state.

A verifier compares the agent's normalised diff against the seed with the gold diff over every
table (anything changed that the oracle did not change fails), and the answer exactly after
normalisation. The stage's proof: every oracle replays without error and scores 1, and the null
policy (do nothing, answer nothing) scores 0.
"""

from __future__ import annotations

import json
from typing import Any

from worldfactory.runtime.answers import normalize_answer
from worldfactory.runtime.diff import digest
from worldfactory.runtime.world import World
from worldfactory.spec import Task


class VerifierError(ValueError):
    """An oracle fails to replay, or a verifier cannot tell the oracle from doing nothing."""


def gold_for(world: World, task: Task) -> dict[str, Any]:
    with world.episode() as ep:
        for i, call in enumerate(task.oracle):
            res = ep.call(call.tool, call.args)
            if not res.ok:
                raise VerifierError(f"task {task.task_id}: oracle step {i} ({call.tool}) failed: {res.error}")
        diff = ep.diff()
    if not diff and task.answer is None:
        raise VerifierError(f"task {task.task_id}: the oracle changes nothing and expects no answer")
    return {
        "digest": digest(diff),
        "diff": diff,
        "answer": normalize_answer(task.answer, task.answer_type),
        "answer_type": task.answer_type,
        "oracle_steps": len(task.oracle),
    }


def build_verifiers(world: World, tasks: list[Task]) -> dict[str, Any]:
    return {
        "world_id": world.world_id,
        "method": "state diff against the seed, every table; answers exact after normalisation",
        "normalization": {name: n.model_dump() for name, n in sorted(world.norm.items())},
        "tasks": {t.task_id: gold_for(world, t) for t in tasks},
    }


def verifiers_json(verifiers: dict[str, Any]) -> str:
    return json.dumps(verifiers, indent=1, sort_keys=True, default=str) + "\n"


def check_verifiers(world: World) -> dict[str, Any]:
    """The proof: oracle 1 and null 0 for every task of a loaded world."""
    from worldfactory.policies.base import run_policy

    oracle_pass = null_pass = 0
    failures: list[str] = []
    for task_id in world.tasks:
        o = run_policy(world, task_id, "oracle")
        n = run_policy(world, task_id, "null")
        oracle_pass += o.verdict.passed
        null_pass += n.verdict.passed
        if not o.verdict.passed:
            failures.append(f"{task_id}: oracle fails ({o.verdict.mismatches[:2]})")
        if n.verdict.passed:
            failures.append(f"{task_id}: doing nothing passes")
    if failures:
        raise VerifierError("verifier check failed: " + "; ".join(failures[:5]))
    return {"tasks": len(world.tasks), "oracle_pass": oracle_pass, "null_pass": null_pass}

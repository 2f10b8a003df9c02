"""Verifiers: replay each oracle on fresh state to get its gold end state.

A verifier compares the agent's normalised diff against the seed with the gold diff over every
table (anything changed that the oracle did not change fails), and the answer exactly after
normalisation. The stage's proof: every oracle replays without error and scores 1, and the null
policy (do nothing, answer nothing) scores 0.
"""

from __future__ import annotations

import json
from typing import Any

from worldfactory.generate.gold import run_oracle
from worldfactory.runtime.answers import answers_match, normalize_answer
from worldfactory.runtime.diff import compare, digest, same_diff
from worldfactory.runtime.world import World
from worldfactory.spec import Task


class VerifierError(ValueError):
    """An oracle fails to replay, or a verifier cannot tell the oracle from doing nothing."""


def gold_for(world: World, task: Task) -> dict[str, Any]:
    outcome = run_oracle(world, task)
    if outcome.failure:
        raise VerifierError(f"task {task.task_id}: {outcome.failure}")
    diff = outcome.diff
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
    """The proof: oracle 1 and null 0 for every task of a loaded world.

    The oracle's end state is the build's one run of it (build/gold.py), graded against the
    verifiers as stored: its diff must match the stored gold, digest included, so a verifiers.json
    edited after the fact fails here. Doing nothing is graded through Episode.verify.
    """
    oracle_pass = null_pass = 0
    failures: list[str] = []
    for task_id, task in world.tasks.items():
        gold = world.verifiers.get("tasks", {}).get(task_id)
        outcome = run_oracle(world, task)
        if gold is None:
            failures.append(f"{task_id}: no verifier")
            continue
        if outcome.failure:
            failures.append(f"{task_id}: {outcome.failure}")
            continue
        diff_ok = same_diff(gold["diff"], outcome.diff) and digest(outcome.diff) == gold["digest"]
        answer_ok = task.answer is None or answers_match(task.answer, gold["answer"], task.answer_type,
                                                          world.rule_refs)
        oracle_pass += diff_ok and answer_ok
        if not diff_ok:
            failures.append(f"{task_id}: oracle fails ({compare(gold['diff'], outcome.diff)[:2]})")
        elif not answer_ok:
            failures.append(f"{task_id}: the stored answer is not the oracle's")
        with world.episode(task_id) as ep:
            null = ep.verify(None)
        null_pass += null.passed
        if null.passed:
            failures.append(f"{task_id}: doing nothing passes")
    if failures:
        raise VerifierError("verifier check failed: " + "; ".join(failures[:5]))
    return {"tasks": len(world.tasks), "oracle_pass": oracle_pass, "null_pass": null_pass}

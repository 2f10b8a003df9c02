"""The policy interface and the two reference policies every verifier is checked against."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from worldfactory.runtime.episode import Episode, Step, Verdict
from worldfactory.runtime.world import World
from worldfactory.spec import Task

Policy = Callable[[Task, Episode], Any]  # acts through episode.call; returns its answer (or None)


def oracle_policy(task: Task, episode: Episode) -> Any:
    """Replays the task's oracle plan and gives the expected answer."""
    for call in task.oracle:
        episode.call(call.tool, call.args)
    return task.answer


def null_policy(task: Task, episode: Episode) -> Any:
    """Does nothing and answers nothing: every verifier must fail it."""
    return None


POLICIES: dict[str, Policy] = {"oracle": oracle_policy, "null": null_policy}


class EpisodeResult(BaseModel):
    world_id: str
    task_id: str
    policy: str
    answer: Any = None
    steps: int
    trace: list[Step]
    verdict: Verdict


def run_policy(world: World, task_id: str, policy: str) -> EpisodeResult:
    """Run one episode of a task with a named policy and grade it."""
    try:
        act = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown policy '{policy}'; choose one of: {', '.join(POLICIES)}") from None
    with world.episode(task_id) as ep:
        assert ep.task is not None
        answer = act(ep.task, ep)
        verdict = ep.verify(answer)
        return EpisodeResult(world_id=world.world_id, task_id=task_id, policy=policy, answer=answer,
                             steps=len(ep.trace), trace=list(ep.trace), verdict=verdict)

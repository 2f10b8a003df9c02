"""The policy interface, the two reference policies every verifier is checked against, and run_policy.

A policy acts on an episode through `episode.call` and returns its answer (or None). It gets a
random stream seeded per (world, task, rollout), so a rollout is reproducible.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from worldfactory.runtime.episode import Episode, Step, Verdict
from worldfactory.runtime.world import World
from worldfactory.spec import Task

Policy = Callable[[Task, Episode, random.Random], Any]


def oracle_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """Replays the task's oracle plan and gives the expected answer."""
    for call in task.oracle:
        episode.call(call.tool, call.args)
    return task.answer


def null_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """Does nothing and answers nothing: every verifier must fail it."""
    return None


class RolloutError(RuntimeError):
    """Rollouts could not complete (a model server that keeps failing); nothing was recorded. (rollouts.py
    names it too: the policies raise it, the rollouts' callers catch it.)"""


class EpisodeResult(BaseModel):
    world_id: str
    task_id: str
    policy: str
    seed: int = 0
    answer: Any = None
    steps: int
    trace: list[Step]
    verdict: Verdict
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0


def policy_named(name: str, error_rate: float = 0.1) -> Policy:
    from worldfactory.policies.careless import CARELESS
    from worldfactory.policies.hard import HARD
    from worldfactory.policies.synthetic import noisy_policy, random_policy
    from worldfactory.policies.weak import WEAK

    table: dict[str, Policy] = {
        "oracle": oracle_policy,
        "null": null_policy,
        "random": random_policy,
        "noisy": noisy_policy(error_rate),
        **WEAK,
        **HARD,
        **CARELESS,
    }
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown policy '{name}'; choose one of: {', '.join(table)} (or openai)") from None


def episode_seed(world: World, task_id: str, rollout: int, salt: int = 0) -> int:
    """The seed of one rollout; salt (an evaluation run's --seed) draws another set, 0 the build's."""
    key = f"{world.brief.generation_seed}:{task_id}:{rollout}" + (f":{salt}" if salt else "")
    return random.Random(key).getrandbits(63)


def run_policy(world: World, task_id: str, policy: str | Policy, seed: int = 0, name: str | None = None,
               error_rate: float = 0.1, explain: bool = True) -> EpisodeResult:
    """Run one episode of a task with a policy (a name or a callable) and grade it."""
    act = policy_named(policy, error_rate) if isinstance(policy, str) else policy
    label = name or (policy if isinstance(policy, str) else getattr(policy, "__name__", "custom"))
    started = time.perf_counter()
    with world.episode(task_id) as ep:
        assert ep.task is not None
        answer = act(ep.task, ep, random.Random(seed))
        verdict = ep.verify(answer, explain)
        return EpisodeResult(world_id=world.world_id, task_id=task_id, policy=label, seed=seed, answer=answer,
                             steps=len(ep.trace), trace=list(ep.trace), verdict=verdict,
                             seconds=round(time.perf_counter() - started, 6))

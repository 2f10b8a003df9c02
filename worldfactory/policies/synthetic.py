"""Synthetic reference policies: `random` (valid random calls) and `noisy` (the oracle with a per-step error rate).

Neither is a model. The noisy oracle is the embedded default for pass-band filtering: it gives
each task a pass rate that falls with its length and its number of writes, so a curriculum can
be cut offline; point the Policy resource at an OpenAI-compatible server for real pass bands.
"""

from __future__ import annotations

import random
from typing import Any

from worldfactory.policies.base import Policy
from worldfactory.runtime.episode import Episode
from worldfactory.spec import Task


def random_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """As many calls as the oracle makes, each a random tool with its valid example arguments."""
    tools = [t for t in episode.world.tool_manifest if (t.get("examples") or {}).get("valid") is not None]
    for _ in range(max(1, len(task.oracle))):
        tool = rng.choice(tools)
        episode.call(tool["name"], dict(tool["examples"]["valid"]))
    return None


def _slip(call_args: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The call an inattentive operator makes instead: another record, or another value."""
    ids = [k for k, v in call_args.items() if k.endswith("_id") and isinstance(v, int)]
    if ids:
        key = rng.choice(ids)
        return {**call_args, key: call_args[key] + rng.choice([1, 2, 3])}
    nums = [k for k, v in call_args.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    if nums:
        key = rng.choice(nums)
        return {**call_args, key: round(call_args[key] * 1.5 + 1, 2)}
    return call_args


def noisy_plan(task: Task, rng: random.Random, error_rate: float) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
    """The calls and the answer of one noisy episode, drawn before any call runs: the policy never
    looks at a result, so its stream alone decides them (rollouts use this to run each distinct
    episode of a task once)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for call in task.oracle:
        if rng.random() < error_rate:
            if rng.random() < 0.5:
                continue
            calls.append((call.tool, _slip(call.args, rng)))
        else:
            calls.append((call.tool, call.args))
    if task.answer is not None and rng.random() < error_rate:
        return calls, "I could not find it"
    return calls, task.answer


def noisy_policy(error_rate: float) -> Policy:
    """The oracle, except that each step goes wrong with probability `error_rate`.

    A step that goes wrong is skipped or made on the wrong record (half and half); an answer
    goes wrong with the same probability.
    """
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error rate must be between 0 and 1, got {error_rate}")

    def act(task: Task, episode: Episode, rng: random.Random) -> Any:
        calls, answer = noisy_plan(task, rng, error_rate)
        for tool, args in calls:
            episode.call(tool, args)
        return answer

    act.__name__ = f"noisy({error_rate:g})"
    return act

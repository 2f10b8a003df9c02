"""The one loop every task family runs: draw candidates, plan each, add it, stop at the quota.

A family module declares:
- ``FAMILY``: the family its tasks are filed under (task ids are ``<FAMILY>-NNN``);
- ``QUOTA``: how many tasks it adds at most;
- ``TRIES``: how many candidates it may try per task wanted (``None``: every candidate);
- ``candidates(b)``: ``Pools`` (several sources, drawn round-robin) or a ``Stream`` (one ordered list);
- ``plan(b, candidate)``: the task's ``Plan``, or ``None`` to skip the candidate.
Every random choice comes from the builder's stream, in the order the families and this loop make
them, so a world's tasks are the same bytes for the same seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from worldfactory.spec import ToolCall

from .builder import TaskBuilder

FAMILY_DECLARES = ("FAMILY", "QUOTA", "TRIES", "candidates", "plan")


@dataclass
class Plan:
    """A task as a family plans it: what a person asks, the oracle's calls, and the expected answer."""

    instruction: str
    oracle: list[ToolCall]
    target: str
    answer: Any = None
    answer_type: str | None = None
    trap: list[ToolCall] = field(default_factory=list)  # the plan that falls for the task's trap (Task.trap)
    distractors: int = 0  # near-duplicates the agent must tell apart (Difficulty.distractors)
    rules: int | None = None  # rules whose interplay decides the action; None: counted from the plan
    requester: dict[str, str] = field(default_factory=dict)  # facts the agent must ask for, by topic
    declined_calls: list[ToolCall] = field(default_factory=list)  # what a careless plan does and this must not
    asked: list[ToolCall] | None = None  # steps the instruction names that the oracle does not take


@dataclass
class Pools:
    """Candidates from several sources: each pool is shuffled, then drawn round-robin."""

    pools: list[list[Any]]


@dataclass
class Stream:
    """Candidates in one list, tried in order; shuffled first unless ``shuffle`` is false."""

    items: list[Any]
    shuffle: bool = True


def take(rng: random.Random, pools: list[list[Any]], quota: int) -> list[Any]:
    """Round-robin over shuffled candidate pools, so every source contributes."""
    for pool in pools:
        rng.shuffle(pool)
    out: list[Any] = []
    while len(out) < quota and any(pools):
        for pool in pools:
            if pool and len(out) < quota:
                out.append(pool.pop())
    return out


def draw(rng: random.Random, found: Pools | Stream, limit: int | None) -> list[Any]:
    """The candidates to try, in order: at most ``limit`` of them (``None``: all)."""
    if isinstance(found, Pools):
        assert limit is not None, "pooled candidates need a limit"
        return take(rng, found.pools, limit)
    if found.shuffle:
        rng.shuffle(found.items)
    return found.items if limit is None else found.items[:limit]


def quota(b: TaskBuilder, family: ModuleType) -> int:
    """The family's quota in this world: its QUOTA scaled by the variant's mix."""
    return max(1, round(family.QUOTA * b.spec.brief.task_mix.get(family.FAMILY, 1.0)))


def run_family(b: TaskBuilder, family: ModuleType, wanted: int | None = None) -> int:
    """Add up to ``wanted`` tasks of the family (default: its quota); the number added."""
    wanted = quota(b, family) if wanted is None else wanted
    limit = None if family.TRIES is None else wanted * family.TRIES
    made = 0
    for candidate in draw(b.rng, family.candidates(b), limit):
        if made >= wanted:
            break
        plan = family.plan(b, candidate)
        if plan is not None:
            made += b.add(family.FAMILY, plan.instruction, plan.oracle, plan.target, plan.answer, plan.answer_type,
                          trap=plan.trap, distractors=plan.distractors, rules=plan.rules,
                          requester=plan.requester, declined_calls=plan.declined_calls, asked=plan.asked)
    return made

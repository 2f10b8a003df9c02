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

from worldfactory.spec import ToolCall, has_name

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
    """Candidates from several sources: each pool is shuffled, then drawn round-robin, ``weights[i]`` from
    pool i per round (None: one from each)."""

    pools: list[list[Any]]
    weights: list[int] | None = None


@dataclass
class Stream:
    """Candidates in one list, tried in order; shuffled first unless ``shuffle`` is false."""

    items: list[Any]
    shuffle: bool = True


def take(rng: random.Random, pools: list[list[Any]], quota: int, weights: list[int] | None = None) -> list[Any]:
    """Round-robin over shuffled candidate pools, so every source contributes (a weighted pool gives that
    many per round)."""
    for pool in pools:
        rng.shuffle(pool)
    out: list[Any] = []
    while len(out) < quota and any(pools):
        for pool, weight in zip(pools, weights or [1] * len(pools), strict=True):
            for _ in range(weight):
                if pool and len(out) < quota:
                    out.append(pool.pop())
    return out


def draw(rng: random.Random, found: Pools | Stream, limit: int | None) -> list[Any]:
    """The candidates to try, in order: at most ``limit`` of them (``None``: all)."""
    if isinstance(found, Pools):
        assert limit is not None, "pooled candidates need a limit"
        return take(rng, found.pools, limit, found.weights)
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
        if plan is not None and b.spec.brief.named and not names_record(b, plan.oracle):
            continue  # a world targeted at wrong records: only tasks that name a record by its name
        if plan is not None:
            made += b.add(family.FAMILY, plan.instruction, plan.oracle, plan.target, plan.answer, plan.answer_type,
                          trap=plan.trap, distractors=plan.distractors, rules=plan.rules,
                          requester=plan.requester, declined_calls=plan.declined_calls, asked=plan.asked)
    return made


def refusal_weights(b: TaskBuilder, refused: list[bool]) -> list[int] | None:
    """Pool weights of a family where a rule decides between a step and its alternative: ``brief.refusals``
    for the pools where the rule refuses the step, 1 for the rest; None (drawn evenly) while it is 1."""
    k = b.spec.brief.refusals
    return None if k == 1 else [k if r else 1 for r in refused]


def names_record(b: TaskBuilder, oracle: list[ToolCall]) -> bool:
    """Whether the plan finds a record by a name of several words (a search on its table's label), where a
    search by part of it finds a look-alike."""
    for call in oracle:
        table = call.tool.removeprefix("search_")
        if call.tool.startswith("search_") and b.spec.has_table(table) and has_name(b.spec.table(table)):
            value = call.args.get(b.spec.table(table).label or "")
            if isinstance(value, str) and len(value.split()) > 1:
                return True
    return False

"""Scripted policies that fail the hard tier's families by one habit each (deterministic, no draw):

- `never_asks` never asks the requester: where a task leaves a fact out it acts on what it can see
  (the first of two records, the record's own amount, the first option); elsewhere it is the oracle;
- `ignores_declines` does what every email asks, including what policy declines and the repeats;
  elsewhere it is the oracle.
Their plans are the mutants of generate/careless.py, so the verifier is proven to fail them.
"""

from __future__ import annotations

import random
from typing import Any

from worldfactory.generate.careless import guess_plan, ignore_decline_plan
from worldfactory.runtime.episode import Episode
from worldfactory.spec import Task


def never_asks_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    for call in guess_plan(task) or task.oracle:
        episode.call(call.tool, call.args)
    return task.answer


def ignores_declines_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    for call in ignore_decline_plan(task) or task.oracle:
        episode.call(call.tool, call.args)
    return task.answer


CARELESS = {"never_asks": never_asks_policy, "ignores_declines": ignores_declines_policy}

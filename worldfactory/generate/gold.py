"""Each oracle plan is run once per build: its outcome is kept for every stage that needs it.

The tasks stage replays every candidate's oracle to accept it; the tasks proof, the gold diffs of
the verifiers and their proof need the same run. The outcome of a plan depends only on the seed,
the tool code and the plan, so it is keyed by their hash and shared within the process. A stage
run in another process computes it again: the cache saves work, never changes an answer.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any, NamedTuple

from worldfactory.audit import AuditReport, audit_db
from worldfactory.requester import ASK_TOOL
from worldfactory.requester import argument_error as ask_error
from worldfactory.runtime.diff import CHANGES_TABLE
from worldfactory.runtime.world import World
from worldfactory.spec import Task

CACHE_SIZE = 20_000  # oracle outcomes kept per process (a world has about 100 to 400 candidates)


class OracleOutcome(NamedTuple):
    failure: str  # empty when every step succeeded
    diff: dict[str, Any]  # the end state's canonical diff against the seed (gold); do not mutate
    audit: AuditReport | None = None  # the realism audit of the end state's changed rows (None on failure)


_CACHE: OrderedDict[str, OracleOutcome] = OrderedDict()


def _key(world: World, task: Task) -> str:
    plan = json.dumps([[c.tool, c.args] for c in task.oracle], sort_keys=True, default=str)
    return hashlib.sha256(f"{world.code_hash}\0{plan}".encode()).hexdigest()


def _end_audit(world: World, ep: Any) -> AuditReport | None:
    """The realism audit of the rows the episode wrote (audit_db's `changed`); None for an episode that lives in
    the confined worker (its connection is there: the stages run their make and prove in it)."""
    conn = getattr(ep, "conn", None)
    if conn is None:
        return None
    changed: dict[str, set[int]] = {}
    for table, key in conn.execute(f"SELECT tbl, id FROM {CHANGES_TABLE}"):
        changed.setdefault(table, set()).add(key)
    return audit_db(world.spec, conn, changed)


def run_oracle(world: World, task: Task, audit: bool = False) -> OracleOutcome:
    """The oracle's outcome on a fresh copy of the seed: the first failing step, or the gold diff; with `audit`,
    also the realism audit of its end state (the tasks stage: it accepts a candidate by it, its proof blocks on
    it). A kept outcome without the audit is run again when one is asked for."""
    key = _key(world, task)
    hit = _CACHE.get(key)
    if hit is not None and (not audit or hit.failure or hit.audit is not None):
        _CACHE.move_to_end(key)
        return hit
    failure = ""
    with world.episode() as ep:
        for i, call in enumerate(task.oracle):
            if call.tool == ASK_TOOL and task.requester:  # asking changes nothing; the topic must be the task's
                error = ask_error(task, call.args)
                if error is not None:
                    failure = f"oracle step {i} ({call.tool}) fails: {error}"
                    break
                continue
            res = ep.call(call.tool, call.args)
            if not res.ok:
                failure = f"oracle step {i} ({call.tool}) fails: {res.error}"
                break
        if failure:
            outcome = OracleOutcome(failure, {})
        else:  # the end state is audited here, while it exists: the tasks proof reads it from this run
            outcome = OracleOutcome(failure, ep.diff(), _end_audit(world, ep) if audit else None)
    _CACHE[key] = outcome
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return outcome

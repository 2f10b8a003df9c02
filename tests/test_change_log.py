"""The verifier's diff reads a trigger-kept change log; these tests hold it to the whole-table diff.

The reference is the slow path: the same calls replayed on a plain connection without triggers,
then every table compared with EXCEPT against the seed (runtime.diff.state_diff). Any row the
change log misses, or any normalisation that drifts, shows up as a difference.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from worldfactory.policies.synthetic import noisy_policy
from worldfactory.runtime.diff import canonical, state_diff
from worldfactory.runtime.toolkit import ToolDB, ToolError
from worldfactory.runtime.world import World


def whole_table_diff(world: World, calls: list[tuple[str, dict]]) -> dict:
    """Replay calls on a trigger-free copy of the seed in autocommit, then diff every table."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.deserialize(world.seed_image)
    conn.execute("PRAGMA foreign_keys = ON")
    db = ToolDB(conn, world.clock)
    for tool, args in calls:
        conn.execute("SAVEPOINT s")
        try:
            world.functions[tool](db, **args)
            conn.execute("RELEASE s")
        except (ToolError, sqlite3.Error):
            conn.execute("ROLLBACK TO s")
            conn.execute("RELEASE s")
    conn.execute("ATTACH DATABASE ':memory:' AS seed")
    conn.deserialize(world.seed_image, name="seed")
    return state_diff(conn, world.norm, sorted(world.norm))


def test_change_log_diff_equals_whole_table_diff(world: World) -> None:
    act = noisy_policy(0.3)
    tasks = sorted(world.tasks.values(), key=lambda t: t.task_id)
    checked = 0
    for i, task in enumerate(tasks[::3]):
        with world.episode(task.task_id) as ep:
            act(task, ep, random.Random(i))
            fast = ep.diff()
            calls = [(s.tool, s.args) for s in ep.trace if s.ok]
        assert fast == canonical(whole_table_diff(world, calls)), task.task_id
        checked += bool(fast)
    assert checked >= 20  # most sampled episodes changed something


@pytest.mark.parametrize("sql", [
    "DELETE FROM _wf_changes",
    "DROP TRIGGER _wf_upd_claims",
    "CREATE TEMP TRIGGER t AFTER UPDATE ON claims BEGIN SELECT 1; END",
    "COMMIT",
    "ATTACH DATABASE ':memory:' AS other",
    "PRAGMA foreign_keys = OFF",
])
def test_tools_cannot_touch_the_change_log_or_the_transaction(worlds: dict[str, World], sql: str) -> None:
    world = worlds["insurance-claims.regional--v001"]
    task = next(t for t in world.tasks.values() if t.family == "lookup_act")
    with world.episode(task.task_id) as ep:
        for c in task.oracle:
            assert ep.call(c.tool, c.args).ok
        before = ep.diff()
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            ep._db._conn.execute(sql)  # what generated code could reach through its ToolDB handle
        assert ep.diff() == before and before
        assert ep.verify(task.answer).passed
    with world.episode(task.task_id) as fresh:  # the pooled connection came back at the seed
        assert fresh.diff() == {}

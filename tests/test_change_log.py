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
from worldfactory.requester import ASK_TOOL
from worldfactory.runtime.diff import canonical, same_diff, state_diff
from worldfactory.runtime.toolkit import ToolDB, ToolError
from worldfactory.runtime.world import World


def whole_table_diff(world: World, calls: list[tuple[str, dict]]) -> dict:
    """Replay calls on a trigger-free copy of the seed in autocommit, then diff every table."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.deserialize(world.seed_image)
    conn.execute("PRAGMA foreign_keys = ON")
    db = ToolDB(conn, world.clock)
    for tool, args in calls:
        if tool == ASK_TOOL:
            continue  # asking the requester changes nothing; the episode answers it, not the world's code
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


def test_reward_only_verify_agrees_with_the_whole_diff(world: World) -> None:
    """verify(explain=False) stops at the first differing table; it must grade exactly as the full diff does."""
    tasks = sorted(world.tasks.values(), key=lambda t: t.task_id)
    outcomes = []
    for i, task in enumerate(tasks[::2]):
        gold = world.verifiers["tasks"][task.task_id]["diff"]
        for rate in (0.0, 0.15, 0.4):
            with world.episode(task.task_id) as ep:
                noisy_policy(rate)(task, ep, random.Random(i))
                full = same_diff(gold, ep.diff(canonical=False))
                fast = world.differ.matches(ep.conn, gold, world.gold_bags(task.task_id))
                assert fast == full, (task.task_id, rate)
                if task.answer is None:
                    assert ep.verify(None, explain=False).passed == full
            outcomes.append(full)
    assert outcomes.count(True) >= 10 and outcomes.count(False) >= 10


def test_reward_only_verify_catches_one_changed_value(world: World) -> None:
    """The oracle's end state with one more column changed on a row it wrote: same rows, same counts, fails."""
    task = next(t for t in sorted(world.tasks.values(), key=lambda t: t.task_id)
                if t.answer is None and "updated" in str(world.verifiers["tasks"][t.task_id]["diff"]))
    gold = world.verifiers["tasks"][task.task_id]["diff"]
    table, part = next((t, d) for t, d in sorted(gold.items()) if "updated" in d)
    row_id = int(next(iter(part["updated"])))
    with world.episode(task.task_id) as ep:
        for c in task.oracle:
            assert ep.call(c.tool, c.args).ok
        assert ep.verify(None, explain=False).passed
        planted = False
        with ep._session.opened() as conn:  # the harness plants the fault; tools could not
            for column in world.norm[table].columns:  # the first column the schema lets change
                if column in world.norm[table].free_text:  # graded as present or not: appending changes nothing
                    continue
                try:
                    conn.execute(f"UPDATE {table} SET {column} = CASE typeof({column}) WHEN 'text' THEN "
                                 f"{column} || 'x' ELSE {column} + 1 END WHERE id = ?", (row_id,))
                except sqlite3.IntegrityError:
                    continue
                planted = True
                break
        assert planted
        assert not same_diff(gold, ep.diff(canonical=False))
        assert not world.differ.matches(ep.conn, gold, world.gold_bags(task.task_id))
        assert not ep.verify(None, explain=False).passed

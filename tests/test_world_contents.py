"""Each example world meets the contract: sizes, integrity, manifest keys, consistent data."""

from __future__ import annotations

import json
import sqlite3

import pytest

from worldfactory.generate.data import check_seed
from worldfactory.runtime.world import World

MANIFEST_KEYS = {"world_id", "seed_type", "domain", "company_type", "variant", "generation_seed",
                 "generator_version", "counts", "task_families", "files", "tools"}


def test_sizes_and_manifest(world: World) -> None:
    m = world.manifest
    assert MANIFEST_KEYS <= set(m)
    assert m["counts"]["tables"] >= 20
    assert m["counts"]["rows"] >= 2000
    assert m["counts"]["tools"] >= 37
    assert m["counts"]["tasks"] >= 50
    assert len(m["task_families"]) >= 4
    assert set(m["tools"].values()) <= {"local-twin", "local-fixture", "bounded-replay", "remote-call"}
    assert m["counts"]["tools"] == len(world.tool_manifest) == len(m["tools"])


def test_every_table_has_a_key(world: World) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(world.seed_image)
    tables = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type='table'").fetchone()[0]
    assert tables == world.manifest["counts"]["tables"]
    for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'").fetchall():
        cols = conn.execute(f"PRAGMA table_info({name})").fetchall()
        assert any(c[5] == 1 for c in cols), f"{name} has no primary key"


def test_a_dangling_key_or_a_forced_bad_value_fails_the_seed_proof(world: World) -> None:
    """Planted in copies of the seed: a reference to no row, then a state outside its CHECK (written
    with CHECKs switched off, as a buggy generator could); the seed proof names each."""
    table = next(t for t in world.spec.tables if t.workflow and any(c.ref for c in t.columns))
    ref = next(c for c in table.columns if c.ref)
    for sql, expected in ((f"UPDATE {table.name} SET {ref.name} = 999999 WHERE id = 1", "foreign_key_check"),
                          (f"UPDATE {table.name} SET {table.workflow.column} = 'no-such-state' WHERE id = 1",
                           "CHECK constraint")):
        conn = sqlite3.connect(":memory:", isolation_level=None)  # autocommit: serialize sees the change
        conn.deserialize(world.seed_image)
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(sql)
        with pytest.raises(ValueError, match=expected):
            check_seed(world.spec, conn.serialize())
    assert check_seed(world.spec, world.seed_image)["invariants"] >= 2  # the untouched seed passes


def test_checks_reject_bad_rows(world: World) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(world.seed_image)
    table = next(t for t in world.spec.tables if t.workflow)
    col = table.workflow.column
    try:
        conn.execute(f"UPDATE {table.name} SET {col} = 'no-such-state' WHERE id = 1")
        raise AssertionError("CHECK constraint did not fire")
    except sqlite3.IntegrityError as exc:
        assert "CHECK" in str(exc)


def test_dates_respect_world_clock(world: World) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(world.seed_image)
    for t in world.spec.tables:
        for c in t.columns:
            if c.type == "date" and c.name not in ("starts_on", "due_on"):
                late = conn.execute(f"SELECT count(*) FROM {t.name} WHERE {c.name} > ?", (world.clock,)).fetchone()[0]
                assert late == 0, f"{t.name}.{c.name} has {late} dates after the world clock"


def test_tasks_jsonl_shape(world: World) -> None:
    lines = world.files["tasks.jsonl"].decode().splitlines()
    assert len(lines) == world.manifest["counts"]["tasks"]
    ids = set()
    for line in lines:
        t = json.loads(line)
        assert {"task_id", "family", "instruction", "oracle", "answer"} <= set(t)
        assert all(set(step) == {"tool", "args"} for step in t["oracle"])
        assert t["task_id"] not in ids
        ids.add(t["task_id"])
        assert "_id" not in t["instruction"] and " id " not in t["instruction"].lower()
    instructions = [json.loads(line)["instruction"] for line in lines]
    assert len(set(instructions)) == len(instructions)

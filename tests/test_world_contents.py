"""Each example world meets the contract: sizes, integrity, manifest keys, consistent data."""

from __future__ import annotations

import json
import sqlite3

from worldfactory.build.data import check_seed
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


def test_file_hashes_match(world: World) -> None:
    import hashlib

    for name, digest in world.manifest["files"].items():
        assert hashlib.sha256(world.files[name]).hexdigest() == digest, name


def test_seed_integrity(world: World) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(world.seed_image)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    tables = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type='table'").fetchone()[0]
    assert tables == world.manifest["counts"]["tables"]
    # every table has a primary key, and most carry foreign keys
    for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'").fetchall():
        cols = conn.execute(f"PRAGMA table_info({name})").fetchall()
        assert any(c[5] == 1 for c in cols), f"{name} has no primary key"
    report = check_seed(world.spec, world.seed_image)  # CHECKs re-asserted, invariants hold
    assert report["rows"] == world.manifest["counts"]["rows"]
    assert report["invariants"] >= 2


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

"""Catalog rows come from published bundles alone: rebuilt from the bundles, they equal what the builds wrote."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import EXAMPLES
from worldfactory.catalog import rebuild_catalog
from worldfactory.rollouts import read_traces_file, replay_rows
from worldfactory.runtime.world import World

TABLES = ("worlds", "tasks", "rollouts", "traces")


def rows(root: Path, table: str) -> list[tuple]:
    out = []
    for part in sorted((root / "catalog" / table).glob("world_id=*/*.parquet")):
        wid = part.parent.name.split("=", 1)[1]
        for row in pq.read_table(part).to_pylist():
            if "path" in row:
                row["path"] = Path(row["path"]).name  # the bundle's folder, wherever the data root is
            out.append((wid, tuple(sorted(row.items()))))
    return sorted(out, key=repr)


def test_rebuilt_catalog_equals_the_incremental_one(worlds_dir: Path, tmp_path: Path) -> None:
    data = worlds_dir.parent
    copy = tmp_path / "data"
    shutil.copytree(data / "worlds", copy / "worlds")
    assert sorted(rebuild_catalog(copy)) == sorted(EXAMPLES)
    for table in TABLES:
        built, rebuilt = rows(data, table), rows(copy, table)
        assert built and built == rebuilt, table
    traces = rows(copy, "traces")
    assert len(traces) > 10_000  # every step of every rollout, 8 per task
    assert all(dict(r)["latency_us"] is None for _, r in traces[:100])  # wall clock is not part of a bundle


def test_a_tampered_trace_in_the_bundle_is_caught_on_replay(worlds_dir: Path) -> None:
    """The rollouts proof replays traces from the bundle's own file: one changed result hash is caught."""
    folder = worlds_dir / EXAMPLES[0]
    world = World.open(folder)
    lines = gzip.decompress((folder / "traces.jsonl.gz").read_bytes()).decode().splitlines()
    first = json.loads(lines[0])
    key = (first["task_id"], first["rollout"])

    def episode(data: bytes) -> list[dict]:
        return [s for s in read_traces_file(data)[1] if (s["task_id"], s["rollout"]) == key]

    assert replay_rows(world, episode((folder / "traces.jsonl.gz").read_bytes())) == []
    first["trace"][0]["result_sha256"] = "0" * 64
    tampered = gzip.compress(("\n".join([json.dumps(first), *lines[1:]]) + "\n").encode())
    assert len(replay_rows(world, episode(tampered))) == 1

"""Every write tool (workflow step, create, update) is exercised by some task, the world records its
coverage, and a world whose steps no task can reach is refused before it is published."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import EXAMPLES, SMALL, small_templates_at
from worldfactory.generate.bundle import COVERAGE_FLOOR, WRITE_KINDS
from worldfactory.runtime.world import World
from worldfactory.stages.core import StageError
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates


def _write_tools(world: World) -> set[str]:
    tools = json.loads((world.path / "tools.json").read_text())
    return {t["name"] for t in tools if t["kind"] in WRITE_KINDS}


def _used(world: World) -> set[str]:
    return {call.tool for task in world.tasks.values() for call in task.oracle}


@pytest.mark.parametrize("wid", EXAMPLES)
def test_every_write_tool_of_the_examples_is_in_a_task(worlds: dict[str, World], worlds_dir: Path, wid: str) -> None:
    world = worlds[wid]
    writes = _write_tools(world)
    assert len(writes) >= 30
    assert writes - _used(world) == set()
    assert world.manifest["coverage"] == 1.0 and world.manifest["coverage_unused"] == []
    [row] = duckdb.sql(f"SELECT coverage, schema_sha256, tool_set_sha256 FROM "
                       f"read_parquet('{worlds_dir.parent}/catalog/worlds/world_id={wid}/*.parquet')").fetchall()
    assert row[0] == 1.0
    assert row[1] == world.manifest["schema_sha256"] and len(row[2]) == 64


def test_created_records_get_values_from_their_generators(worlds: dict[str, World]) -> None:
    """A task that creates a contact names a person, not 'New contact 123'; a created code is the next one."""
    said = [t.instruction for w in worlds.values() for t in w.tasks.values()
            if any(c.tool.startswith("create_") for c in t.oracle)]
    assert said
    assert not [s for s in said if "New contact" in s or "new contact 1" in s.lower()]


def test_steps_no_task_can_reach_fail_the_bundle_before_publishing(tmp_path: Path) -> None:
    """Plant the fault: three workflow steps from a status no seeded request holds. No task can exercise
    them, coverage falls below the floor, and the build stops naming them; nothing is published."""
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    text = text.replace("enum: [open, resolved, closed], gen: {choice: [open, resolved, closed], weights: [4, 3, 2]}",
                        "enum: [open, resolved, closed, on_hold], gen: {choice: [open, resolved, closed]}")
    steps = "".join(f"""        - name: {name}
          from: [on_hold]
          to: open
          verb: "{name.replace('_', ' ')} {{obj}}"
          description: Take a request off hold.
""" for name in ("release_hold", "resume_request", "lift_hold"))
    text = text.replace("        - name: close_request\n", steps + "        - name: close_request\n")
    pack.write_text(text)
    out = tmp_path / "out"
    with pytest.raises(StageError, match=r"only 86% of the write tools.*floor 95%.*lift_hold, release_hold, "
                                          r"resume_request"):
        build_world(SMALL[0], out, load_templates(root))
    assert not (out / "worlds" / SMALL[0]).exists()
    assert COVERAGE_FLOOR == 0.95


def test_small_worlds_cover_every_write_tool(tmp_path: Path) -> None:
    root = small_templates_at(tmp_path / "templates")
    for wid in SMALL:
        build_world(wid, tmp_path / "out", load_templates(root))
        world = World.open(tmp_path / "out" / "worlds" / wid)
        assert _write_tools(world) - _used(world) == set(), wid

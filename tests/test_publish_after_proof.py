"""Only proven worlds are published: a failing bundle_complete leaves no bundle and no catalog rows, or the
previous ones untouched, whichever path ran the stages (the engine's build_world, Dagster's assets)."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path

import dagster as dg
import pytest

import worldfactory.stages.pipeline
import worldfactory_dagster.assets.stage as stage_assets_module
from tests.conftest import SMALL
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, StageError
from worldfactory.stages.pipeline import StageFailed, build_world
from worldfactory.templates import load_templates
from worldfactory_dagster.pipelines.definitions import make_definitions
from worldfactory_dagster.resources.world_store import WorldStore

PLANTED = "planted fault: bundle_complete fails"
WORLD_ROWS = ("worlds", "tasks", "rollouts", "traces", "bands")  # a published world's rows (costs: any build's)
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _failing_proof(ctx: BuildContext) -> dict[str, int | float | str]:
    raise StageError(f"{ctx.world_id}: {PLANTED}")


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage registry as both paths read it, with world_bundle's proof failing (run here, not confined)."""
    stages = (*STAGES[:-1], dataclasses.replace(STAGES[-1], prove=_failing_proof, confined=()))
    monkeypatch.setattr(worldfactory.stages.pipeline, "STAGES", stages)
    monkeypatch.setattr(stage_assets_module, "STAGES", stages)


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _published(data: Path, world_id: str) -> dict[str, dict[str, str]]:
    """The world's bundle and its world catalog rows, file by file (empty when there are none)."""
    out = {"bundle": _digests(data / "worlds" / world_id) if (data / "worlds" / world_id).is_dir() else {}}
    for table in WORLD_ROWS:
        part = data / "catalog" / table / f"world_id={world_id}"
        out[table] = _digests(part) if part.is_dir() else {}
    return out


def test_engine_keeps_the_previous_bundle_and_rows_when_bundle_complete_fails(
        tmp_path: Path, small_templates: Path, small_data: Path, planted: None) -> None:
    wid = SMALL[0]
    data = tmp_path / "data"
    shutil.copytree(small_data, data, ignore=shutil.ignore_patterns(".built-*", "build"))
    before = _published(data, wid)
    assert before["bundle"] and all(before[t] for t in WORLD_ROWS)  # a published world to keep
    inode = (data / "worlds" / wid / "world.json").stat().st_ino  # a rebuild publishes the same bytes anew
    with pytest.raises(StageFailed, match=PLANTED):
        build_world(wid, data, templates=load_templates(small_templates), force=True)
    assert _published(data, wid) == before
    assert (data / "worlds" / wid / "world.json").stat().st_ino == inode, "the bundle was published again"
    assert not list((data / "worlds").glob(".*")), "a staging folder was left behind"


def test_engine_publishes_nothing_for_a_new_world_when_bundle_complete_fails(
        tmp_path: Path, small_templates: Path, planted: None) -> None:
    wid = SMALL[1]
    data = tmp_path / "data"
    with pytest.raises(StageFailed, match=PLANTED):
        build_world(wid, data, templates=load_templates(small_templates))
    assert _published(data, wid) == {"bundle": {}, **{t: {} for t in WORLD_ROWS}}
    assert not (data / "worlds").exists() or not any((data / "worlds").iterdir()), "something was left in worlds/"
    assert (data / "catalog" / "costs" / f"world_id={wid}").is_dir()  # what the failed build spent is kept


def test_dagster_publishes_nothing_when_bundle_complete_fails(tmp_path: Path, small_templates: Path,
                                                             planted: None) -> None:
    wid = SMALL[0]
    store = WorldStore(root=str(tmp_path / "data"), templates_root=str(small_templates))
    defs = make_definitions(store)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("world", [wid])
        res = defs.resolve_job_def("world_build").execute_in_process(
            instance=instance, partition_key=wid, raise_on_error=False, run_config=QUIET)
    assert not res.success
    [failed] = [e for e in res.get_asset_check_evaluations() if not e.passed]
    assert failed.check_name == "bundle_complete" and PLANTED in failed.metadata["reason"].value
    assert _published(store.data_root, wid) == {"bundle": {}, **{t: {} for t in WORLD_ROWS}}
    assert not (store.data_root / "worlds").is_dir() or not any((store.data_root / "worlds").iterdir())

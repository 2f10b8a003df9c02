"""What the `worldfactory` CLI does through Dagster: register worlds, build them, delete them.

Builds run in this process against the persistent instance under DAGSTER_HOME (default
`.dagster_home/` in the working directory, created on first use), so every build the CLI makes
shows in the UI afterwards with its metadata, checks and lineage.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel

from assets.stage import PROGRESS
from pipelines.definitions import make_definitions
from pipelines.partitions import world_partitions
from resources.world_store import WorldStore
from worldfactory.build.pipeline import is_up_to_date
from worldfactory.build.stages import STAGES, inputs_fingerprint
from worldfactory.catalog import remove_world_rows
from worldfactory.registry import mark_deleted, unmark_deleted

INSTANCE_YAML = """# Written by `worldfactory` on first use: local SQLite storage under this folder.
telemetry:
  enabled: false
"""
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


class WorldOutcome(BaseModel):
    world_id: str
    ok: bool
    skipped: bool = False
    run_id: str = ""
    failure: str = ""


def dagster_home() -> Path:
    """DAGSTER_HOME if set, else ./.dagster_home; created with a dagster.yaml if missing."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(INSTANCE_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def open_instance() -> dg.DagsterInstance:
    dagster_home()
    return dg.DagsterInstance.get()


def root_cause(error: Any) -> str:
    """The innermost error's message: Dagster wraps the engine's own error in its step error."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return error.message.strip()


def _failure(result: dg.ExecuteInProcessResult) -> str:
    for ev in result.get_asset_check_evaluations():
        if not ev.passed:
            reason = ev.metadata.get("reason")
            text = str(reason.value).strip("`\n ") if reason is not None else "no reason recorded"
            return f"{ev.asset_key.to_user_string()}: check {ev.check_name} failed: {text}"
    for ev in result.get_step_failure_events():
        data = ev.step_failure_data
        if data.error is not None:
            return f"{ev.step_key}: {root_cause(data.error)}"
    return "the run failed; open it in the UI (`worldfactory ui`)"


def build_worlds(ids: list[str], store: WorldStore, force: bool = False,
                 on_stage: Callable[[str, str], None] | None = None,
                 on_done: Callable[[WorldOutcome], None] | None = None) -> list[WorldOutcome]:
    """Register each world as a partition and materialize its stages, one run per world."""
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    instance = open_instance()
    defs = make_definitions(store)
    job = defs.resolve_job_def("world_build")
    existing = set(instance.get_dynamic_partitions(world_partitions.name))
    new = [w for w in ids if w not in existing]
    if new:
        instance.add_dynamic_partitions(world_partitions.name, new)
    ts = store.templates()
    outcomes = []
    token = PROGRESS.set(on_stage)
    try:
        for wid in ids:
            unmark_deleted(store.data_root, wid)  # built by name: the registry may keep it again
            dest = store.data_root / "worlds" / wid
            if not force and is_up_to_date(dest, inputs_fingerprint(ts, wid, store.briefs_dir)):
                outcome = WorldOutcome(world_id=wid, ok=True, skipped=True)
            else:
                res = job.execute_in_process(instance=instance, partition_key=wid, raise_on_error=False,
                                             run_config=QUIET)
                outcome = WorldOutcome(world_id=wid, ok=res.success, run_id=res.run_id,
                                       failure="" if res.success else _failure(res))
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome)
    finally:
        PROGRESS.reset(token)
    defs.resolve_job_def("catalog_refresh").execute_in_process(instance=instance, run_config=QUIET)
    return outcomes


def delete_world(world_id: str, store: WorldStore) -> list[str]:
    """Remove a world's bundle, work folder, catalog rows and Dagster partition; remember the deletion."""
    removed: list[str] = []
    for folder in (store.data_root / "worlds" / world_id, store.data_root / "build" / world_id):
        if folder.exists():
            shutil.rmtree(folder)
            removed.append(str(folder))
    removed += [str(p) for p in remove_world_rows(store.data_root / "catalog", world_id)]
    instance = open_instance()
    if instance.has_dynamic_partition(world_partitions.name, world_id):
        instance.delete_dynamic_partition(world_partitions.name, world_id)
        removed.append(f"Dagster partition '{world_id}' of '{world_partitions.name}' ({dagster_home()})")
    if removed:
        mark_deleted(store.data_root, world_id)
    return removed


STAGE_COUNT = len(STAGES)

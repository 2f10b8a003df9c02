"""build_world: every stage in order for one world ID, each proved before the next runs.

This is the engine's own sequential path (tests, benches, `worldfactory build --no-dagster`).
The Dagster assets run the same stages one by one (see worldfactory/stages/core.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from worldfactory.seeds import check_world_id
from worldfactory.stages import STAGES
from worldfactory.stages.core import (
    BuildContext,
    StageError,
    WorkDir,
    inputs_fingerprint,
    run_make,
    run_prove,
)
from worldfactory.templates import TemplateSet, load_templates

Progress = Callable[[str], None]


class BuildResult(BaseModel):
    world_id: str
    path: str
    skipped: bool
    counts: dict[str, int]
    verification: dict[str, Any]
    seconds: float
    run_id: str = ""  # the Dagster run that built it, when built through Dagster


class StageFailed(StageError):
    """A stage's proof failed; the message names the world, the check and the reason."""


def is_up_to_date(dest: Path, inputs: str) -> bool:
    manifest = dest / "world.json"
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text()).get("inputs_fingerprint") == inputs
    except json.JSONDecodeError:
        return False


def clean_staging(worlds: Path) -> list[Path]:
    """Remove the staging folders of builds whose process is gone (killed mid-publish)."""
    removed = []
    for folder in worlds.glob(".staging-*") if worlds.is_dir() else []:
        try:
            pid = int(folder.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
            continue  # its build is still running
        except (ValueError, IndexError, ProcessLookupError):
            pass
        except PermissionError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def ensure_catalog_rows(data_root: Path, dest: Path) -> bool:
    """A published world's catalog rows, written again from its bundle if a kill after publishing lost them."""
    import hashlib

    from worldfactory.catalog import publish_world_rows
    from worldfactory.runtime.world import read_bundle

    part = data_root / "catalog" / "worlds" / f"world_id={dest.name}" / "part-0.parquet"
    digest = hashlib.sha256((dest / "world.json").read_bytes()).hexdigest()
    if part.is_file() and (data_root / "catalog" / "tasks" / f"world_id={dest.name}").is_dir():
        import pyarrow.parquet as pq

        # ParquetFile, not read_table: read_table goes through pyarrow.dataset, which imports pandas (~0.5 s)
        if pq.ParquetFile(part).read(columns=["world_json_sha256"]).column(0).to_pylist() == [digest]:
            return False
    read_bundle(dest)  # every file as world.json lists it, or a clear error
    publish_world_rows(data_root / "catalog", dest)
    return True


def up_to_date_result(world_id: str, dest: Path, started: float) -> BuildResult:
    manifest = json.loads((dest / "world.json").read_text())
    return BuildResult(world_id=world_id, path=str(dest), skipped=True, counts=manifest["counts"],
                       verification=manifest["verification"], seconds=time.perf_counter() - started)


def build_world(world_id: str, root: Path | str = "data", templates: TemplateSet | None = None,
                force: bool = False, progress: Progress | None = None,
                briefs_dir: Path | None = None) -> BuildResult:
    """Build, prove and publish one world bundle under root/worlds/<world_id>."""
    check_world_id(world_id)  # before any folder is named after it
    started = time.perf_counter()
    ts = templates or load_templates()
    data_root = Path(root)
    briefs = briefs_dir if briefs_dir is not None else data_root / "briefs"
    dest = data_root / "worlds" / world_id
    inputs = inputs_fingerprint(ts, world_id, briefs)
    clean_staging(data_root / "worlds")
    if not force and is_up_to_date(dest, inputs):
        from worldfactory.catalog import clear_failed_build

        ensure_catalog_rows(data_root, dest)
        clear_failed_build(data_root, world_id)  # the published bundle is what these inputs build
        return up_to_date_result(world_id, dest, started)
    say = progress or (lambda _stage: None)
    work_path = data_root / "build" / f".engine-{world_id}-{os.getpid()}"
    shutil.rmtree(work_path, ignore_errors=True)
    ctx = BuildContext(world_id=world_id, templates=ts, work=WorkDir(work_path, world_id), data_root=data_root,
                       briefs_dir=briefs, inputs=inputs)
    try:
        for stage in STAGES:
            say(stage.name)
            try:
                run_make(stage, ctx)
            except Exception as exc:  # the catalog marks the failed attempt as a failed proof does (run_prove)
                from worldfactory.catalog import record_failed_build

                record_failed_build(data_root, world_id, stage.name, "make", f"{type(exc).__name__}: {exc}", inputs)
                raise
            proof = run_prove(stage, ctx)
            if not proof.passed:
                raise StageFailed(f"{world_id}: stage {stage.name} failed its check '{stage.check}': {proof.reason}")
    finally:
        shutil.rmtree(work_path, ignore_errors=True)
    manifest = json.loads((dest / "world.json").read_text())
    return BuildResult(world_id=world_id, path=str(dest), skipped=False, counts=manifest["counts"],
                       verification=manifest["verification"], seconds=time.perf_counter() - started)

"""What the `worldfactory` CLI does through Dagster: register worlds, build them, delete them.

Builds run in process (in this process, or with --jobs N in N worker processes) against the
persistent instance under DAGSTER_HOME (default `.dagster_home/` in the working directory,
created on first use), so every build the CLI makes shows in the UI afterwards with its metadata,
checks and lineage.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel

from worldfactory.catalog import catalog_path, remove_world_rows
from worldfactory.drafts import text_brief_file
from worldfactory.parallel import emit, run_in_processes
from worldfactory.registry import mark_deleted, unmark_deleted
from worldfactory.stages.pipeline import ensure_catalog_rows
from worldfactory_dagster.assets.stage import PROGRESS
from worldfactory_dagster.assets.versions import FORCE_TAG, stale_worlds
from worldfactory_dagster.pipelines.definitions import make_definitions
from worldfactory_dagster.pipelines.partitions import RANGE_END, RANGE_START, world_partitions
from worldfactory_dagster.resources.world_store import WorldStore

# The daemon's run monitoring cancels runs that never start (start_timeout_seconds). It cannot see a
# STARTED run whose process was killed: for the default run launcher and execute_in_process there is
# no run worker to check (DefaultRunLauncher.supports_check_run_worker_health is False), so the CLI
# tags each run with its process and fails the runs of dead processes itself (fail_dead_runs).
RUN_MONITORING = """run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  max_resume_run_attempts: 0
  poll_interval_seconds: 30
"""
INSTANCE_YAML = """# Written by `worldfactory` on first use: local SQLite storage under this folder.
telemetry:
  enabled: false
""" + RUN_MONITORING
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
PROCESS_TAG = "worldfactory/process"  # host:pid:start time of the process that runs the build
IN_PROGRESS = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
               dg.DagsterRunStatus.CANCELING]
# What an interrupt (SIGINT, or SIGTERM, which Dagster maps to it during a run) inside a step becomes.
INTERRUPTS = {"KeyboardInterrupt", "DagsterExecutionInterruptedError"}
STOPPED = "the build was stopped (SIGINT or SIGTERM) while this run was in progress"


def _start_ticks(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, from /proc), so a reused pid is not taken for it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid()) or ''}"


def _alive(tag: str) -> bool:
    _host, pid, ticks = tag.rsplit(":", 2)
    if not Path(f"/proc/{pid}").exists():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, ValueError):
            return True
        return not ticks  # no /proc here to compare start times: the pid is alive
    return _start_ticks(int(pid)) == ticks


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed the in-progress runs this host's builds started whose process is gone (killed mid-build)."""
    host = socket.gethostname()
    failed = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=IN_PROGRESS)):
        run = record.dagster_run
        tag = run.tags.get(PROCESS_TAG, "")
        if tag.count(":") < 2 or tag.rsplit(":", 2)[0] != host or _alive(tag):
            continue
        instance.report_run_failed(run, f"the process that ran this build ({tag.rsplit(':', 2)[1]} on {host}) "
                                        "is gone: it was killed or crashed mid-build")
        failed.append(run.run_id)
    return failed


def fail_own_runs(instance: dg.DagsterInstance, why: str) -> list[str]:
    """Mark failed the in-progress runs of this process: the build was stopped (SIGINT, SIGTERM) mid-run."""
    mine = process_tag()
    failed = []
    for record in instance.get_run_records(dg.RunsFilter(tags={PROCESS_TAG: mine}, statuses=IN_PROGRESS)):
        instance.report_run_failed(record.dagster_run, why)
        failed.append(record.dagster_run.run_id)
    return failed


def _gone(pid: str, own: bool) -> bool:
    """Whether the process that named a scratch file is gone (or is this one, when `own`)."""
    if not pid.isdigit():
        return False
    if own and int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def clean_scratch(data_root: Path, own: bool = False) -> list[Path]:
    """Remove what builds that are gone left half-made under data_root (and this process's own, when `own`,
    as a stopped build exits): staging folders beside the published worlds, `--no-dagster` work folders
    (build/.engine-<world>-<pid>) and files half-written into a work folder (.<name>.tmp-<pid>). A world's
    work folder itself stays: Dagster's stage outputs live there, each written whole by a rename."""
    removed: list[Path] = []
    candidates = [*(data_root / "worlds").glob(".staging-*"), *(data_root / "build").glob(".engine-*"),
                  *(data_root / "build").glob("*/.*.tmp-*"), *(data_root / "build").glob("*/*/.*.tmp-*")]
    for path in candidates:
        if _gone(path.name.rsplit("-", 1)[-1], own):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class WorldOutcome(BaseModel):
    world_id: str
    ok: bool
    skipped: bool = False
    run_id: str = ""
    failure: str = ""
    seconds: float = 0.0  # the world's wall time: its run's, or in a batched run its own stages'


def world_store(data_root: Path, templates_root: str | None = None) -> WorldStore:
    """The WorldStore for a data root and templates folder: how the CLI names them to Dagster."""
    return WorldStore(root=str(data_root.resolve()), templates_root=templates_root or "")


def workspace_file() -> Path:
    """The workspace.yaml that `dagster dev` loads (the project's own)."""
    from worldfactory_dagster.resources.world_store import PROJECT_ROOT

    return PROJECT_ROOT / "workspace.yaml"


def dagster_home() -> Path:
    """DAGSTER_HOME if set, else ./.dagster_home; created with a dagster.yaml if missing."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path.cwd() / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(INSTANCE_YAML)
    elif "run_monitoring:" not in cfg.read_text():  # an instance written before run monitoring was on
        cfg.write_text(cfg.read_text().rstrip("\n") + "\n" + RUN_MONITORING)
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


def interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether the run ended because the build was interrupted: execute_in_process turns the interrupt
    into a failed step (or a failed run) and returns, so the build would otherwise go on to the next world."""
    for ev in result.get_step_failure_events():
        error = ev.step_failure_data.error
        while error is not None:
            if error.cls_name in INTERRUPTS:
                return True
            error = error.cause
    return any(ev.event_type == dg.DagsterEventType.RUN_FAILURE and "interrupted" in (ev.message or "")
               for ev in result.all_events)


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


def contiguous_batches(ids: list[str], order: list[str], size: int, jobs: int = 1) -> list[list[str]]:
    """Split ids into runs of at most `size` that are contiguous in the partition order (a range run).

    With jobs > 1 a run also takes at most 1/jobs of the worlds not yet in a run (guided
    self-scheduling): runs shrink toward the end, so the workers finish close together instead of
    one idling while another builds a whole batch, and a few worlds (20 with --batch 20) still
    spread over every worker instead of making one run on one core.
    """
    position = {key: i for i, key in enumerate(order)}
    batches: list[list[str]] = []
    left, cap = len(ids), size
    for wid in sorted(ids, key=position.__getitem__):
        last = batches[-1] if batches else None
        if last and len(last) < cap and position[wid] == position[last[-1]] + 1:
            last.append(wid)
        else:
            cap = max(1, min(size, -(-left // max(1, jobs))))
            batches.append([wid])
        left -= 1
    return batches


def _world_seconds(store: WorldStore, world_id: str) -> float:
    """A world's own wall time in a batched run: the sum of its stages' wall seconds (make + proof)."""
    try:
        return round(sum(c.wall_seconds for c in store.work(world_id).costs().values()), 3)
    except (OSError, ValueError):
        return 0.0


@contextlib.contextmanager
def _stop_signals_seen() -> Iterator[Callable[[], bool]]:
    """Whether SIGINT or SIGTERM arrived meanwhile, whatever handler was installed then. A run swallows an
    interrupt that lands outside a step (Dagster's capture_interrupts records it, then forgets it as the run
    ends), and the build would go on to its next world; the wakeup fd sees every signal."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)

    def seen() -> bool:
        try:
            return any(n in (signal.SIGINT, signal.SIGTERM) for n in os.read(r, 4096))
        except BlockingIOError:
            return False

    try:
        yield seen
    finally:
        signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)


def _run(job: dg.JobDefinition, instance: dg.DagsterInstance, group: list[str], tags: dict[str, str]
         ) -> tuple[dg.ExecuteInProcessResult, float]:
    started = time.perf_counter()
    tags = {**tags, PROCESS_TAG: process_tag()}
    with _stop_signals_seen() as stopped:
        if len(group) == 1:
            res = job.execute_in_process(instance=instance, partition_key=group[0], raise_on_error=False,
                                         run_config=QUIET, tags=tags)
        else:
            res = job.execute_in_process(instance=instance, raise_on_error=False, run_config=QUIET, tags={
                **tags, RANGE_START: group[0], RANGE_END: group[-1]})
        if (not res.success and interrupted(res)) or stopped():
            raise KeyboardInterrupt  # stop the build: a run cut short is already reported failed
    return res, time.perf_counter() - started


def build_group(job: dg.JobDefinition, instance: dg.DagsterInstance, store: WorldStore, group: list[str],
                force: bool = False) -> list[WorldOutcome]:
    """One run for the group (one world, or a contiguous range); a failed batch is rerun one world per run."""
    tags = {FORCE_TAG: "true"} if force else {}
    res, seconds = _run(job, instance, group, tags)
    if len(group) == 1:
        return [WorldOutcome(world_id=group[0], ok=res.success, run_id=res.run_id, seconds=round(seconds, 3),
                             failure="" if res.success else _failure(res))]
    if res.success:
        return [WorldOutcome(world_id=wid, ok=True, run_id=res.run_id, seconds=_world_seconds(store, wid))
                for wid in group]
    outcomes = []
    for wid in group:  # isolate the failure: one run per world
        one, secs = _run(job, instance, [wid], tags)
        outcomes.append(WorldOutcome(world_id=wid, ok=one.success, run_id=one.run_id, seconds=round(secs, 3),
                                     failure="" if one.success else _failure(one)))
    return outcomes


_WORKER: dict[str, Any] = {}  # a --jobs worker process's store, instance and job, made once per process


def job_for(defs: dg.Definitions, store: WorldStore, group: list[str]) -> dg.JobDefinition:
    """`brief_build` (the draft step, then every stage) for a group holding a free-text brief's world, else
    `world_build`: a catalog world's run has no draft step."""
    drafted = any(text_brief_file(wid, store.briefs_dir) is not None for wid in group)
    return defs.resolve_job_def("brief_build" if drafted else "world_build")


def _worker_init(root: str, templates_root: str) -> None:
    store = WorldStore(root=root, templates_root=templates_root)
    _WORKER.update(store=store, instance=open_instance(), defs=make_definitions(store))


def _worker_build(task: tuple[list[str], bool]) -> list[WorldOutcome]:
    """In a worker process: build one group through Dagster, sending each stage start to the parent."""
    group, force = task
    token = PROGRESS.set(emit)
    try:
        return build_group(job_for(_WORKER["defs"], _WORKER["store"], group), _WORKER["instance"],
                           _WORKER["store"], group, force)
    finally:
        PROGRESS.reset(token)


def build_worlds(ids: list[str], store: WorldStore, force: bool = False, batch: int = 1, jobs: int = 1,
                 on_stage: Callable[[str, str], None] | None = None,
                 on_done: Callable[[WorldOutcome], None] | None = None) -> list[WorldOutcome]:
    """Register each world as a partition and materialize its stages: one run per world, or per batch.

    A batch is a run over a contiguous range of world partitions; if it fails, its worlds are
    rebuilt one run each, so a bad world is named precisely and the good ones still land.

    With jobs > 1 the runs go to that many worker processes, each running `world_build` in
    process against the same on-disk instance (DAGSTER_HOME), so worlds build side by side, one
    core each. Worlds write disjoint files (work folder, bundle and catalog partitions are per
    world); the catalog is refreshed once, here, after every world has finished.

    A world that is current (assets/versions.py: Dagster's latest bundle and the published one
    both record its current inputs fingerprint) is skipped unless `force`.
    """
    instance = open_instance()
    fail_dead_runs(instance)
    clean_scratch(store.data_root)
    try:
        return _build_worlds(instance, ids, store, force, batch, jobs, on_stage, on_done)
    except KeyboardInterrupt:  # stopped: no run of this build stays in progress, no half-made file stays
        fail_dead_runs(instance)  # the --jobs workers' runs (the workers are gone by now)
        fail_own_runs(instance, STOPPED)
        clean_scratch(store.data_root, own=True)
        raise


def _build_worlds(instance: dg.DagsterInstance, ids: list[str], store: WorldStore, force: bool, batch: int,
                  jobs: int, on_stage: Callable[[str, str], None] | None,
                  on_done: Callable[[WorldOutcome], None] | None) -> list[WorldOutcome]:
    defs = make_definitions(store)
    existing = set(instance.get_dynamic_partitions(world_partitions.name))
    new = [w for w in ids if w not in existing]
    if new:
        instance.add_dynamic_partitions(world_partitions.name, new)
    outcomes: dict[str, WorldOutcome] = {}

    def finish(outcome: WorldOutcome) -> None:
        outcomes[outcome.world_id] = outcome
        if on_done is not None:
            on_done(outcome)

    for wid in ids:
        unmark_deleted(store.data_root, wid)  # built by name: the registry may keep it again
    stale = set(ids) if force else set(stale_worlds(instance, store, ids))
    todo = []
    restored = False
    for wid in ids:
        if wid in stale:
            todo.append(wid)
        else:  # current: its catalog rows are written again if a kill after publishing lost them
            restored |= ensure_catalog_rows(store.data_root, store.data_root / "worlds" / wid)
            finish(WorldOutcome(world_id=wid, ok=True, skipped=True))
    order = instance.get_dynamic_partitions(world_partitions.name)
    groups = contiguous_batches(todo, order, max(1, batch), jobs)
    if jobs > 1 and len(groups) > 1:
        def collected(task: tuple[list[str], bool], result: list[WorldOutcome] | None,
                      error: BaseException | None) -> None:
            group = task[0]
            if error is not None:  # the worker process itself failed (killed, out of memory)
                result = [WorldOutcome(world_id=wid, ok=False, failure=f"the build worker failed: "
                                       f"{type(error).__name__}: {error}") for wid in group]
            for outcome in result or []:
                finish(outcome)

        run_in_processes(_worker_build, [(g, force) for g in groups], jobs, on_result=collected,
                         on_event=on_stage or (lambda wid, stage: None), initializer=_worker_init,
                         initargs=(store.root, store.templates_root))
    else:
        token = PROGRESS.set(on_stage)
        try:
            for group in groups:
                for outcome in build_group(job_for(defs, store, group), instance, store, group, force):
                    finish(outcome)
        finally:
            PROGRESS.reset(token)
    if todo or restored or not catalog_path(store.data_root).is_file():  # else the catalog is as it was
        defs.resolve_job_def("catalog_refresh").execute_in_process(instance=instance, run_config=QUIET)
    return [outcomes[w] for w in ids]


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


"""Evaluation runs: one policy's episodes on some worlds, under a run id of their own.

A run lives in data/runs/<run id>/: run.json (its full configuration, without secrets),
episodes.jsonl (a journal, one line per finished episode, appended as episodes finish: a killed
run resumes from it and never plays a finished episode again), and, once complete, rollouts.parquet
and traces.parquet sorted by (world, task, rollout), curated_tasks.jsonl (the run policy's band: its
curriculum) and summary.json and report.json (evals/summary.py). Its catalog rows are files named for the run
(part-<run id>.parquet) in each world's partition of `runs`, `run_rollouts`, `run_traces` and
`bands`, so a run never touches the build's rows or another run's. The run id is the policy label
and a hash of the configuration (or a given name): the same configuration is the same run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from worldfactory import GENERATOR_VERSION
from worldfactory.catalog_files import SCHEMAS, write_policy_rows
from worldfactory.rollouts import Rollout, RolloutConfig, _rollout, _step_row, curate, dumps_sorted, pass_rates
from worldfactory.runtime.world import WorldError

RUN_TABLES = ("runs", "run_rollouts", "run_traces")  # a run's own rows; `bands` holds the build's too
BUILD_BAND = "build"  # the file name of the build's band in `bands` (its policy is in the rows)
JOURNAL = "episodes.jsonl"
CURATED = "curated_tasks.jsonl"  # the run policy's band, as the build's curated_tasks.jsonl is the reference's
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


class RunError(WorldError):
    """A run cannot be made, found or resumed; the message says which and what to do."""


class RunConfig(BaseModel):
    """Everything that decides a run's episodes: two equal configurations are the same run."""

    worlds: dict[str, str]  # world id -> sha256 of its world.json (a rebuilt world is another run)
    tasks: list[str] | None = None  # None: every task each world serves
    policy: str
    label: str
    model: str = ""
    base_url: str = ""  # never the key: it stays in the environment
    k: int
    seed: int = 0
    error_rate: float = 0.1
    max_turns: int = 40
    code_version: str


class RunInfo(BaseModel):
    """run.json: the configuration, the run id, and whether every episode has finished."""

    run_id: str
    name: str = ""
    config: RunConfig
    complete: bool = False
    episodes: int = 0
    passes: int = 0
    bundles: dict[str, str] = Field(default_factory=dict)  # world id -> bundle path it was played on


def code_version() -> str:
    try:
        package = metadata.version("worldfactory")
    except metadata.PackageNotFoundError:
        package = "unknown"
    return f"worldfactory {package}, generator {GENERATOR_VERSION}"


def make_config(bundles: list[Path], cfg: RolloutConfig, tasks: list[str] | None) -> RunConfig:
    worlds: dict[str, str] = {}
    for b in bundles:
        manifest = json.loads((b / "world.json").read_text())
        if manifest["world_id"] in worlds:
            raise RunError(f"world {manifest['world_id']} is given twice ({b}); name each world once")
        worlds[manifest["world_id"]] = hashlib.sha256((b / "world.json").read_bytes()).hexdigest()
    return RunConfig(worlds=dict(sorted(worlds.items())), tasks=tasks, policy=cfg.policy, label=cfg.label,
                     model=cfg.model, base_url=_public_url(cfg.base_url), k=cfg.k, seed=cfg.seed,
                     error_rate=cfg.error_rate, max_turns=cfg.max_turns, code_version=code_version())


def _public_url(url: str) -> str:
    """The base URL without a user:password part or a query (where keys hide)."""
    return re.sub(r"//[^/@]*@", "//", url).split("?")[0]


def run_id_of(config: RunConfig, name: str = "") -> str:
    if name:
        if not NAME_RE.match(name) or name == BUILD_BAND:
            raise RunError(f"run name {name!r}: use letters, digits, '.', '_' or '-' (at most 80), starting "
                           f"with a letter or digit; not {BUILD_BAND!r})")
        return name
    digest = hashlib.sha256(dumps_sorted(config.model_dump()).encode()).hexdigest()[:10]
    label = re.sub(r"[^A-Za-z0-9._-]", "_", config.label)
    return f"{label}-{digest}"


def runs_root(data_root: Path) -> Path:
    return data_root / "runs"


def run_dir(data_root: Path, run_id: str) -> Path:
    return runs_root(data_root) / run_id


def load_run(data_root: Path, run_id: str) -> RunInfo:
    path = run_dir(data_root, run_id) / "run.json"
    if not path.is_file():
        known = ", ".join(list_run_ids(data_root)) or "none yet"
        raise RunError(f"no evaluation run {run_id!r} under {runs_root(data_root)} (runs: {known}); "
                       f"start one with `worldfactory eval run WORLD --policy P`")
    return RunInfo.model_validate_json(path.read_text())


def list_run_ids(data_root: Path) -> list[str]:
    return sorted(p.parent.name for p in runs_root(data_root).glob("*/run.json"))


def _write_info(folder: Path, info: RunInfo) -> None:
    tmp = folder / "run.json.tmp"
    tmp.write_text(json.dumps(info.model_dump(), indent=1, sort_keys=True) + "\n")
    tmp.replace(folder / "run.json")


def journal(folder: Path) -> list[dict[str, Any]]:
    """The finished episodes; a line cut short by a kill is ignored (its episode runs again)."""
    path = folder / JOURNAL
    if not path.is_file():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


def _drop_torn_line(path: Path) -> None:
    """Cut a last line a kill left unfinished, so the next episode's line starts on a line of its own."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _line(r: Rollout) -> bytes:
    row = r.model_dump(exclude={"trace", "seconds"})
    row["trace"] = [_step_row(s) for s in r.trace]
    return (dumps_sorted(row) + "\n").encode()


OpenWorld = Callable[[Path], Any]


def execute(data_root: Path, bundles: list[Path], cfg: RolloutConfig, tasks: list[str] | None, open_world: OpenWorld,
            name: str = "", on_done: Callable[[int], None] | None = None) -> RunInfo:
    """Play the run (or resume it): every (world, task, rollout) not yet in the journal, appended as it finishes."""
    config = make_config(bundles, cfg, tasks)
    rid = run_id_of(config, name)
    folder = run_dir(data_root, rid)
    if (folder / "run.json").is_file():
        old = load_run(data_root, rid)
        if old.config != config:
            raise RunError(f"run {rid!r} exists with another configuration; pick another --name, or delete it "
                           f"with `worldfactory eval delete {rid}`")
    folder.mkdir(parents=True, exist_ok=True)
    info = RunInfo(run_id=rid, name=name, config=config, bundles={w: str(b) for w, b in zip(config.worlds, sorted(
        bundles, key=lambda b: json.loads((b / "world.json").read_text())["world_id"]), strict=True)})
    _write_info(folder, info)
    _drop_torn_line(folder / JOURNAL)
    done = {(e["world_id"], e["task_id"], e["rollout"]) for e in journal(folder)}
    opened: dict[str, Any] = {}
    with (folder / JOURNAL).open("ab") as out:
        for wid, bundle in info.bundles.items():
            world = opened[wid] = open_world(Path(bundle))
            ids = [t for t in (tasks or list(world.tasks)) if t in world.tasks]
            for tid in ids:
                missing = [i for i in range(cfg.k) if (wid, tid, i) not in done]
                if not missing:
                    continue

                def keep(r: Rollout) -> None:
                    out.write(_line(r))
                    out.flush()
                    if on_done is not None:
                        on_done(1)

                _play(world, cfg, tid, missing, keep)
    info = finish(data_root, rid)
    from worldfactory.evals.summary import write_summary  # the same layer; summary reads runs

    write_summary(data_root, rid, open_world, opened)
    return info


def resume(data_root: Path, rid: str, open_world: OpenWorld, api_key: str = "unused",
           on_done: Callable[[int], None] | None = None) -> RunInfo:
    """Finish a run from its run.json alone (the Dagster asset's way in): an unfinished run plays only its
    missing episodes; a complete one is left as it is, and only gets its summary if it lacks one."""
    info = load_run(data_root, rid)
    folder = run_dir(data_root, rid)
    if info.complete:
        if not (folder / "summary.json").is_file():
            from worldfactory.evals.summary import write_summary

            write_summary(data_root, rid, open_world)
        return info
    c = info.config
    cfg = RolloutConfig(policy=c.policy, k=c.k, error_rate=c.error_rate, base_url=c.base_url, model=c.model,
                        api_key=api_key, max_turns=c.max_turns, seed=c.seed)
    return execute(data_root, [Path(b) for b in info.bundles.values()], cfg, c.tasks, open_world, name=info.name,
                   on_done=on_done)


def _play(world: Any, cfg: RolloutConfig, task_id: str, rollouts: list[int], keep: Callable[[Rollout], None]) -> None:
    """Some rollouts of one task: a model's kept one by one as each ends, a synthetic policy's (run in the
    confined worker, milliseconds each) when the task's batch ends."""
    if cfg.policy == "openai":
        asyncio.run(_play_model(world, cfg, task_id, rollouts, keep))
        return
    from worldfactory.rollouts import run_rollouts_confined as run_rollouts

    for r in run_rollouts(world, cfg, [task_id]):
        if r.rollout in rollouts:
            keep(r)


async def _play_model(world: Any, cfg: RolloutConfig, task_id: str, rollouts: list[int],
                      keep: Callable[[Rollout], None]) -> None:
    from worldfactory.policies.base import episode_seed
    from worldfactory.policies.openai_agent import ChatAgent

    agent = ChatAgent(world, cfg)
    gate = asyncio.Semaphore(cfg.concurrency)

    async def one(i: int) -> None:
        async with gate:
            result = await agent.run(task_id, episode_seed(world, task_id, i, cfg.seed))
        keep(_rollout(world, task_id, i, result, cfg.label))

    try:
        await asyncio.gather(*(one(i) for i in rollouts))
    finally:
        await agent.close()


def finish(data_root: Path, rid: str) -> RunInfo:
    """Once every episode is in the journal: the run's Parquet files and its catalog rows."""
    folder = run_dir(data_root, rid)
    info = load_run(data_root, rid)
    episodes = sorted(journal(folder), key=lambda e: (e["world_id"], e["task_id"], e["rollout"]))
    seen: set[tuple[str, str, int]] = set()
    unique = []
    for e in episodes:
        key = (e["world_id"], e["task_id"], e["rollout"])
        if key not in seen:
            seen.add(key)
            unique.append(e)
    rollouts = [{"world_id": e["world_id"], **_rollout_row(rid, e)} for e in unique]
    traces = [{"world_id": e["world_id"], **s} for e in unique for s in _trace_rows(rid, e)]
    pq.write_table(pa.Table.from_pylist(rollouts, schema=SCHEMAS["run_rollouts"].append(
        pa.field("world_id", pa.string()))), folder / "rollouts.parquet", compression="zstd")
    pq.write_table(pa.Table.from_pylist(traces, schema=SCHEMAS["run_traces"].append(
        pa.field("world_id", pa.string()))), folder / "traces.parquet", compression="zstd")
    curated = [{"world_id": w, **row, "policy": info.config.label, "run_id": rid}
               for w, rows in band(unique).items() for row in sorted(rows, key=lambda r: r["task_id"])]
    (folder / CURATED).write_text("".join(dumps_sorted(row) + "\n" for row in curated))
    info = info.model_copy(update={"complete": True, "episodes": len(unique),
                                   "passes": sum(e["reward"] >= 1.0 for e in unique)})
    _write_info(folder, info)
    publish_run_rows(data_root / "catalog", folder)
    return info


def _rollout_row(rid: str, e: dict[str, Any]) -> dict[str, Any]:
    keys = ("task_id", "family", "policy", "rollout", "seed", "reward", "steps", "prompt_tokens",
            "completion_tokens", "cost_usd")
    return {"run_id": rid, **{k: e[k] for k in keys}}


def _trace_rows(rid: str, e: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"run_id": rid, "task_id": e["task_id"], "rollout": e["rollout"], **s} for s in e["trace"]]


def run_episodes(data_root: Path, rid: str) -> list[dict[str, Any]]:
    """A run's finished episodes (answer and steps included), in (world, task, rollout) order."""
    load_run(data_root, rid)
    eps = {(e["world_id"], e["task_id"], e["rollout"]): e for e in journal(run_dir(data_root, rid))}
    return [eps[k] for k in sorted(eps)]


def band(episodes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per world, the pass band of these episodes: tasks with 0 < pass rate < 1 over k."""
    out: dict[str, list[dict[str, Any]]] = {}
    for wid in sorted({e["world_id"] for e in episodes}):
        mine = [e for e in episodes if e["world_id"] == wid]
        rates = pass_rates([Rollout.model_validate({**e, "trace": []}) for e in mine])
        out[wid] = curate(rates, {e["task_id"]: e["family"] for e in mine})
    return out


def curated_tasks(data_root: Path, rid: str) -> list[dict[str, Any]]:
    """A complete run's curated_tasks.jsonl: the band of the policy it played, as its curriculum."""
    info = load_run(data_root, rid)
    path = run_dir(data_root, rid) / CURATED
    if not info.complete or not path.is_file():
        raise RunError(f"run {rid!r} is unfinished, so it has no band yet ({path}); run it again to finish it")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def publish_run_rows(catalog_root: Path, folder: Path) -> None:
    """A complete run's catalog rows from its folder alone: one file per (table, world) named for the run."""
    info = RunInfo.model_validate_json((folder / "run.json").read_text())
    if not info.complete:
        return
    rid = info.run_id
    episodes = list({(e["world_id"], e["task_id"], e["rollout"]): e for e in journal(folder)}.values())
    c = info.config
    bands = band(episodes)
    for wid in c.worlds:
        mine = sorted((e for e in episodes if e["world_id"] == wid), key=lambda e: (e["task_id"], e["rollout"]))
        write_policy_rows(catalog_root, "runs", wid, rid, [{
            "run_id": rid, "name": info.name, "policy": c.label, "model": c.model, "base_url": c.base_url,
            "k": c.k, "seed": c.seed, "tasks": len({e["task_id"] for e in mine}), "episodes": len(mine),
            "passes": sum(e["reward"] >= 1.0 for e in mine), "code_version": c.code_version}])
        write_policy_rows(catalog_root, "run_rollouts", wid, rid, [_rollout_row(rid, e) for e in mine])
        write_policy_rows(catalog_root, "run_traces", wid, rid, [s for e in mine for s in _trace_rows(rid, e)])
        write_policy_rows(catalog_root, "bands", wid, rid, [
            {**row, "policy": c.label, "run_id": rid} for row in bands.get(wid, [])])


def build_band_rows(bundle: Path, policy: str) -> list[dict[str, Any]]:
    """The build's band (curated_tasks.jsonl) as `bands` rows of the build's reference policy."""
    path = bundle / "curated_tasks.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    return [{"task_id": r["task_id"], "family": r["family"], "policy": policy, "run_id": "",
             "pass_rate": r["pass_rate"], "passes": r["passes"], "rollouts": r["rollouts"]} for r in rows]


def rebuild_runs(data_root: Path) -> list[str]:
    """Every run's catalog rows again, from the run folders alone (the build's bands are left alone)."""
    catalog = data_root / "catalog"
    for table in RUN_TABLES:
        shutil.rmtree(catalog / table, ignore_errors=True)
    for path in (catalog / "bands").glob("world_id=*/part-*.parquet"):
        if path.name != f"part-{BUILD_BAND}.parquet":
            path.unlink()
    ids = list_run_ids(data_root)
    for rid in ids:
        publish_run_rows(catalog, run_dir(data_root, rid))
    return ids


def delete_run(data_root: Path, rid: str) -> list[Path]:
    """The run's folder and its files in every table; nothing of the build or another run."""
    load_run(data_root, rid)
    removed = []
    for table in (*RUN_TABLES, "bands"):
        for path in (data_root / "catalog" / table).glob(f"world_id=*/part-{rid}.parquet"):
            path.unlink()
            removed.append(path)
    shutil.rmtree(run_dir(data_root, rid))
    removed.append(run_dir(data_root, rid))
    return removed

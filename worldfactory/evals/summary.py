"""One run at a glance: pass^1 and pass^k per family (and per world and family), its band per world,
its failure causes and one example episode per cause.

Written once a run is complete (summary.json, report.json and causes.jsonl in its folder), so the
CLI, the world page, the catalog site and the Dagster asset's metadata all read the same numbers
without replaying anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from worldfactory.evals import runs
from worldfactory.evals.causes import CAUSES, Report, diagnoses, tally
from worldfactory.evals.stats import FamilyRates, family_rates

SUMMARY = "summary.json"
REPORT = "report.json"
CAUSES_FILE = "causes.jsonl"  # one line per failed episode: world, task, rollout, family, cause


class Example(BaseModel):
    """The example episode of one cause, as a page links to it."""

    world_id: str
    task_id: str
    rollout: int
    instruction: str
    detail: str


class RunSummary(BaseModel):
    run_id: str
    policy: str  # the policy label (noisy-0.1, rule_blind, openai-<model>)
    k: int
    worlds: list[str]
    episodes: int
    passes: int
    families: dict[str, FamilyRates]  # family (and 'all') -> pass^1 and pass^k with intervals
    by_world: dict[str, dict[str, float]]  # world -> family -> pass^1
    band: dict[str, int]  # world -> tasks in the run policy's band (0 < pass rate < 1 over k)
    causes: dict[str, int]  # cause -> failed episodes, in CAUSES order
    top_cause: str | None
    examples: dict[str, Example]


def summarize(info: runs.RunInfo, episodes: list[dict[str, Any]], rep: Report) -> RunSummary:
    by_world: dict[str, dict[str, float]] = {}
    for wid in info.config.worlds:
        rates = family_rates([e for e in episodes if e["world_id"] == wid])
        by_world[wid] = {f: r.pass1.rate for f, r in rates.items() if f != "all"}
    bands = runs.band(episodes)
    return RunSummary(
        run_id=info.run_id, policy=info.config.label, k=info.config.k, worlds=list(info.config.worlds),
        episodes=len(episodes), passes=sum(e["reward"] >= 1.0 for e in episodes), families=family_rates(episodes),
        by_world=by_world, band={w: len(bands.get(w, [])) for w in info.config.worlds}, causes=rep.by_cause,
        top_cause=rep.top_cause,
        examples={c: Example(world_id=d.world_id, task_id=d.task_id, rollout=d.rollout, instruction=d.instruction,
                             detail=d.detail) for c, d in rep.examples.items()})


def write_summary(data_root: Path, rid: str, open_world: Callable[[Path], Any],
                  opened: dict[str, Any] | None = None) -> RunSummary:
    """Diagnose a complete run's failures and write report.json and summary.json into its folder."""
    info = runs.load_run(data_root, rid)
    if not info.complete:
        raise runs.RunError(f"run {rid!r} is unfinished; run it again to finish it before it is summarised")
    episodes = runs.run_episodes(data_root, rid)
    failing = sorted({e["world_id"] for e in episodes if e["reward"] < 1.0})
    worlds = {w: (opened or {}).get(w) or open_world(Path(info.bundles[w])) for w in failing}
    diags = diagnoses(episodes, worlds)
    rep = tally(rid, len(episodes), diags)
    summary = summarize(info, episodes, rep)
    folder = runs.run_dir(data_root, rid)
    (folder / CAUSES_FILE).write_text("".join(json.dumps(
        {"world_id": d.world_id, "task_id": d.task_id, "rollout": d.rollout, "family": d.family, "cause": d.cause},
        sort_keys=True) + "\n" for d in diags))
    for name, model in ((REPORT, rep), (SUMMARY, summary)):
        tmp = folder / f"{name}.tmp"
        tmp.write_text(json.dumps(model.model_dump(), indent=1, sort_keys=True, default=str) + "\n")
        tmp.replace(folder / name)
    return summary


def load_summary(folder: Path) -> RunSummary | None:
    """A run folder's summary, or None where the run has not been summarised (unfinished, or an older run)."""
    path = folder / SUMMARY
    return RunSummary.model_validate_json(path.read_text()) if path.is_file() else None


def load_report(folder: Path) -> Report | None:
    path = folder / REPORT
    return Report.model_validate_json(path.read_text()) if path.is_file() else None


def summaries(data_root: Path, world_id: str | None = None) -> list[RunSummary]:
    """Every summarised run (those that played `world_id`, if given), by run id."""
    out = []
    for rid in runs.list_run_ids(data_root):
        s = load_summary(runs.run_dir(data_root, rid))
        if s is not None and (world_id is None or world_id in s.worlds):
            out.append(s)
    return out


def cause_text(cause: str) -> str:
    return CAUSES.get(cause, cause)


def episode_causes(folder: Path) -> list[dict[str, Any]]:
    """causes.jsonl: each failed episode's world, task, rollout, family and cause."""
    path = folder / CAUSES_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []

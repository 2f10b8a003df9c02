"""Targeted worlds: from a run's diagnosis, new variants that concentrate on the causes that dominate it.

For each world the run played, one brief file (data/briefs/<slug>.yaml, a world `brief.<slug>--v001`) of
the same seed type, built through the same pipeline as any other brief (the Dagster sensor registers it,
or `worldfactory target RUN` builds it at once). What it turns up:

- task mix: each family's quota scaled by how often the dominant causes failed its episodes in the run
  (the most exposed family x MAX_MIX, a family they never failed x MIN_MIX);
- rule values near thresholds (a rule ignored): each rule a guard compares a record's column with is set
  among that column's values over the records the guarded step may act on, so that about RULE_PASS of them
  pass the rule and the rest do not (a policy that never reads the rules does the step, wrong on the side
  the rule refuses; a small world's rule-decided families use up every record, so this side's share is
  theirs); the median where the comparison has no side (= or !=); and the
  families where a rule decides between a step and its alternative (conditional, handbook) draw REFUSALS
  candidates the rule refuses per one it allows (the brief's `refusals`), since doing the step asked for is
  what a policy that ignores the rule does, and it is wrong only where the rule refuses it; and a larger
  scale (as for horizons), so those families have the records in their states to fill the quotas the mix
  raised (a small world runs out of them);
- horizons (gave up, required write missing): a larger scale, so bulk tasks act on more records and
  workflows run longer after their first write;
- distractors (wrong record): look-alike names (the brief's `distractors`: that share of person and company
  names take the first word of an earlier one), so a search by part of a name finds another record; the
  most near-duplicate pairs (the brief's `twins`, generate/twins.py), and the discover family, whose tasks
  name records the way people do, beside a near-duplicate, at its largest quota; and the families keep only
  the tasks that find a record by a name of several words (the brief's `named`), where a search by part of
  the name finds the look-alike.

Nothing here draws at random: the same run gives the same briefs, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from worldfactory.briefs import MAX_MIX, MAX_SCALE, brief_path, load_brief_file
from worldfactory.evals import runs
from worldfactory.evals.summary import episode_causes, load_report
from worldfactory.seeds import BRIEF_PREFIX, _nice
from worldfactory.spec import WorldSpec
from worldfactory.templates import TemplateError, TemplateSet
from worldfactory.variants import MIX_FAMILIES, TWIN_LEVELS

DOMINANT_SHARE = 0.25  # a cause with at least this share of a run's failures dominates it (the top one always)
MIN_MIX = 0.25  # a family the dominant causes never failed keeps this share of its quota
SCALE_UP = 1.5  # horizons: the source world's scale times this (at most MAX_SCALE)
DISTRACTORS = 0.6  # distractors: the share of names drawn as look-alikes
TWINS = max(TWIN_LEVELS)  # distractors: near-duplicate pairs per kind
LOOKALIKE_FAMILIES = ("discover",)  # distractors: families made of look-alikes, at MAX_MIX
RULE_PASS = 0.25  # thresholds: the share of the records a guarded step may act on that its rule lets pass
REFUSALS = 4  # thresholds: rule-decided candidates the rule refuses, drawn per one it allows
THRESHOLD_CAUSES = ("rule_ignored",)
HORIZON_CAUSES = ("gave_up", "missing_write", "looped")
DISTRACTOR_CAUSES = ("wrong_record",)


class TargetBrief(BaseModel):
    """One targeted variant: where it came from, what it turns up, and the brief file that registers it."""

    world_id: str
    source: str  # the world of the run it is made from (its seed type)
    path: str
    domain: str
    company_type: str
    task_mix: dict[str, float]
    rules: dict[str, float]
    scale: float | None
    distractors: float = 0.0
    twins: int | None = None  # None: the variant's own
    refusals: int = 1  # rule-decided tasks: refused candidates drawn per allowed one
    named: bool = False  # the families keep only tasks that find a record by its name
    knobs: list[str]  # what was turned up: task_mix, thresholds, horizons, distractors


class TargetPlan(BaseModel):
    run_id: str
    causes: list[str]  # the dominant causes, the top one first
    briefs: list[TargetBrief]


def dominant(by_cause: dict[str, int]) -> list[str]:
    """The causes with at least DOMINANT_SHARE of the failures, most first (the top cause always)."""
    total = sum(by_cause.values())
    order = sorted(by_cause, key=lambda c: (-by_cause[c], c))
    return [c for i, c in enumerate(order) if i == 0 or by_cause[c] >= DOMINANT_SHARE * total]


def exposure(episodes: list[dict[str, Any]], by_family: dict[str, dict[str, int]],
             causes: list[str]) -> dict[str, float]:
    """Per family: the share of its episodes that failed with one of these causes."""
    played: dict[str, int] = {}
    for e in episodes:
        played[e["family"]] = played.get(e["family"], 0) + 1
    return {f: round(sum(by_family.get(f, {}).get(c, 0) for c in causes) / n, 4) for f, n in sorted(played.items())}


def task_mix(rates: dict[str, float], most: tuple[str, ...] = ()) -> dict[str, float]:
    """Each mixable family's quota factor, proportional to its exposure (MIN_MIX to MAX_MIX; the most exposed
    mixable family not in `most` MAX_MIX), and MAX_MIX for the families in `most`."""
    top = max((rates.get(f, 0.0) for f in MIX_FAMILIES if f not in most), default=0.0)
    if top <= 0:
        return {}
    return {f: MAX_MIX if f in most else max(MIN_MIX, round(MAX_MIX * rates.get(f, 0.0) / top, 2))
            for f in MIX_FAMILIES}


def near_thresholds(bundle: Path) -> dict[str, float]:
    """Each rule a guard compares a record's column with, set among that column's values over the records in
    the states the guarded step starts from so that about RULE_PASS of them pass (the median for = and !=;
    the first such guard of a rule decides)."""
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_text())
    integer = {r.name: r.integer for r in spec.rules}
    out: dict[str, float] = {}
    conn = sqlite3.connect(f"file:{bundle / 'seed.db'}?mode=ro", uri=True)
    try:
        for table in spec.tables:
            if table.workflow is None:
                continue
            columns = {c.name for c in table.columns}
            for tr in table.workflow.transitions:
                for g in tr.guards:
                    col = g.field.removeprefix("row.")
                    if g.rule is None or g.rule in out or not g.field.startswith("row.") or col not in columns:
                        continue
                    marks = ",".join("?" * len(tr.from_))
                    values = [v for (v,) in conn.execute(
                        f'SELECT "{col}" FROM "{table.name}" WHERE "{table.workflow.column}" IN ({marks})',
                        tr.from_) if isinstance(v, int | float) and not isinstance(v, bool)]
                    if len(values) >= 2:
                        out[g.rule] = _nice(passing(sorted(values), g.op), integer.get(g.rule, False))
    finally:
        conn.close()
    return dict(sorted(out.items()))


def passing(values: list[float], op: str) -> float:
    """The value of these (sorted) that about RULE_PASS of them pass when compared to it with `op`."""
    if op in ("<", "<="):
        return values[round(RULE_PASS * (len(values) - 1))]
    if op in (">", ">="):
        return values[round((1 - RULE_PASS) * (len(values) - 1))]
    return statistics.median(values)


def slug_for(run_id: str, source: str) -> str:
    digest = hashlib.sha256(f"{run_id}\0{source}".encode()).hexdigest()[:6]
    return f"t{digest}-{source.split('--')[0].replace('.', '-')}"[:63].rstrip("-")


def propose(data_root: Path, rid: str) -> TargetPlan:
    """The targeted briefs of a complete, summarised run (nothing written)."""
    info = runs.load_run(data_root, rid)
    rep = load_report(runs.run_dir(data_root, rid))
    if not info.complete or rep is None:
        raise runs.RunError(f"run {rid!r} has no diagnosis yet (report.json); run it again to finish it")
    if not rep.by_cause:
        raise runs.RunError(f"run {rid!r}: no episode failed, so there is no cause to target")
    causes = dominant(rep.by_cause)
    episodes = runs.run_episodes(data_root, rid)
    briefs = []
    for wid, bundle_path in info.bundles.items():
        bundle = Path(bundle_path)
        brief = json.loads((bundle / "brief.json").read_text())
        mine = [e for e in episodes if e["world_id"] == wid]
        lookalikes = any(c in DISTRACTOR_CAUSES for c in causes)
        mix = task_mix(exposure(mine, _world_family_causes(data_root, rid, wid), causes),
                       LOOKALIKE_FAMILIES if lookalikes else ())
        knobs = ["task_mix"] if mix else []
        rules: dict[str, float] = {}
        refusals = 1
        if any(c in THRESHOLD_CAUSES for c in causes):
            rules, refusals = near_thresholds(bundle), REFUSALS
            knobs.append("thresholds")
        scale = None
        if any(c in HORIZON_CAUSES or c in THRESHOLD_CAUSES for c in causes):
            scale = round(min(MAX_SCALE, brief["scale"] * SCALE_UP), 3)
            knobs += ["horizons"] if any(c in HORIZON_CAUSES for c in causes) else []
        distractors, twins, named = 0.0, None, False
        if lookalikes:
            distractors, twins, named = DISTRACTORS, TWINS, True
            knobs.append("distractors")
        slug = slug_for(rid, wid)
        briefs.append(TargetBrief(world_id=f"{BRIEF_PREFIX}.{slug}--v001", source=wid,
                                  path=str(data_root / "briefs" / f"{slug}.yaml"), domain=brief["domain"],
                                  company_type=brief["company_type"], task_mix=mix, rules=rules, scale=scale,
                                  distractors=distractors, twins=twins, refusals=refusals, named=named,
                                  knobs=knobs))
    return TargetPlan(run_id=rid, causes=causes, briefs=briefs)


def _world_family_causes(data_root: Path, rid: str, wid: str) -> dict[str, dict[str, int]]:
    """family -> cause -> failed episodes, of one world of the run (the diagnosis's causes.jsonl)."""
    out: dict[str, dict[str, int]] = {}
    for row in episode_causes(runs.run_dir(data_root, rid)):
        if row["world_id"] == wid:
            fam = out.setdefault(row["family"], {})
            fam[row["cause"]] = fam.get(row["cause"], 0) + 1
    return out


def brief_text(plan: TargetPlan, t: TargetBrief) -> str:
    body: dict[str, Any] = {"domain": t.domain, "company_type": t.company_type, "variants": 1,
                            "origin": f"targeted at {', '.join(plan.causes)} of run {plan.run_id} on {t.source}"}
    if t.task_mix:
        body["task_mix"] = t.task_mix
    if t.rules:
        body["rules"] = t.rules
    if t.scale is not None:
        body["scale"] = t.scale
    if t.distractors:
        body["distractors"] = t.distractors
    if t.twins is not None:
        body["twins"] = t.twins
    if t.refusals != 1:
        body["refusals"] = t.refusals
    if t.named:
        body["named"] = True
    return yaml.safe_dump(body, sort_keys=True)


def register(plan: TargetPlan, templates: TemplateSet) -> list[str]:
    """Write each brief file, validated first in a scratch folder (a brief that would not load is never
    registered; an existing one with other content is never replaced). The world IDs."""
    for t in plan.briefs:
        path = Path(t.path)
        text = brief_text(plan, t)
        if brief_path(path.parent, path.stem) != path:
            raise TemplateError(f"{path.with_suffix('.md')} exists: remove it to target run {plan.run_id}")
        if path.is_file() and path.read_text() != text:
            raise TemplateError(f"{path}: exists with other content; remove it to target run {plan.run_id} again")
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / path.name).write_text(text)
            load_brief_file(Path(scratch) / path.name, templates)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return [t.world_id for t in plan.briefs]

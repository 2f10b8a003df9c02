"""The build stages as separate steps over a work folder: `make` writes a stage's files, `prove` checks them.

The engine's build_world runs every stage in order; each Dagster asset runs one `make` and its
blocking asset check runs the matching `prove`. Both paths share this code and the work folder
layout, so they write the same bytes. A proof is recorded with the hashes of the files it
covered, and the bundle stage refuses inputs whose proof is missing, failed or stale: a world
can only be published from proven stages, whichever way its stages were run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

import worldfactory
from worldfactory import confine
from worldfactory.generate.bundle import publish, sha256, world_manifest, world_readme
from worldfactory.generate.data import build_seed_db, check_seed
from worldfactory.generate.gold import run_oracle
from worldfactory.generate.probes import probes_for
from worldfactory.generate.schema import build_spec, check_schema, schema_sql
from worldfactory.generate.tasks import generate_tasks
from worldfactory.generate.tools import tool_specs, tools_json, tools_source
from worldfactory.generate.validity import check_world, report_jsonl, summary
from worldfactory.generate.verifiers import VerifierError, build_verifiers, check_verifiers, verifiers_json
from worldfactory.rollouts import RolloutConfig
from worldfactory.runtime.world import World
from worldfactory.sandbox import check_tools_in_sandbox
from worldfactory.seeds import expand_world
from worldfactory.spec import Brief, Task, WorldSpec
from worldfactory.templates import TemplateSet

BUNDLE_FILES = ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json", "tasks.jsonl",
                "verifiers.json", "verifier_report.jsonl", "rollouts.json", "curated_tasks.jsonl", "README.md",
                "world.json")
WORLD_FILES = ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json", "tasks.jsonl",
               "verifiers.json")
REPLAY_SAMPLE = 25  # rollout episodes whose traces the rollouts proof replays


class StageError(ValueError):
    """A stage cannot run: an input is missing, or an upstream proof failed or is stale."""


class StageCost(BaseModel):
    """What one stage spent. Zeros on the offline path are measured zeros, not missing values."""

    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    cost_usd: float = 0.0
    corrections: int = 0


class StageReport(BaseModel):
    world_id: str
    stage: str
    files: dict[str, str]  # name -> sha256 of what the stage wrote
    counts: dict[str, int]
    cost: StageCost


class Proof(BaseModel):
    """The outcome of a stage's proof, kept in the work folder next to the files it covered."""

    world_id: str
    stage: str
    check: str
    passed: bool
    reason: str = ""
    details: dict[str, int | float | str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)


class WorkDir:
    """A world's work folder: the stages' files, their cost records and their proofs.

    Files are replaced atomically (write beside, then rename), so a crash never leaves a
    half-written stage file for the next stage to read.
    """

    def __init__(self, path: Path, world_id: str) -> None:
        self.path = path
        self.world_id = world_id

    def _atomic(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def write(self, name: str, data: bytes) -> str:
        self._atomic(self.path / name, data)
        return sha256(data)

    def read(self, name: str, stage: str) -> bytes:
        path = self.path / name
        if not path.is_file():
            raise StageError(f"{self.world_id}: stage {stage} needs {name}, which is not built yet; "
                             f"materialize the upstream stages first")
        return path.read_bytes()

    def files(self, names: tuple[str, ...] = BUNDLE_FILES) -> dict[str, bytes]:
        return {n: (self.path / n).read_bytes() for n in names if (self.path / n).is_file()}

    def hashes(self, names: tuple[str, ...]) -> dict[str, str]:
        return {n: sha256((self.path / n).read_bytes()) for n in names if (self.path / n).is_file()}

    def write_cost(self, stage: str, cost: StageCost) -> None:
        self._atomic(self.path / "costs" / f"{stage}.json", cost.model_dump_json().encode())

    def costs(self) -> dict[str, StageCost]:
        folder = self.path / "costs"
        if not folder.is_dir():
            return {}
        return {p.stem: StageCost.model_validate_json(p.read_bytes()) for p in sorted(folder.glob("*.json"))}

    def write_proof(self, proof: Proof) -> None:
        self._atomic(self.path / "proofs" / f"{proof.stage}.json", proof.model_dump_json(indent=1).encode())

    def proof(self, stage: str) -> Proof | None:
        path = self.path / "proofs" / f"{stage}.json"
        return Proof.model_validate_json(path.read_bytes()) if path.is_file() else None

    def clear_proof(self, stage: str) -> None:
        (self.path / "proofs" / f"{stage}.json").unlink(missing_ok=True)


@dataclass
class BuildContext:
    """Everything a stage needs: the world, the templates, and where its files go."""

    world_id: str
    templates: TemplateSet
    work: WorkDir
    data_root: Path  # bundles under data_root/worlds, catalogs under data_root/catalog
    briefs_dir: Path | None = None
    inputs: str = ""  # fingerprint of code + templates + brief, recorded in world.json
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # the policy that cuts the pass band
    usage: StageCost = field(default_factory=StageCost)  # tokens and dollars a stage spends (model policies)
    cache: dict[str, Any] = field(default_factory=dict)  # parsed inputs shared by stages in one process

    def brief(self, stage: str) -> Brief:
        return Brief.model_validate_json(self.work.read("brief.json", stage))

    def spec(self, stage: str) -> WorldSpec:
        raw = self.work.read("spec.json", stage)
        key = ("spec", sha256(raw))
        if key not in self.cache:
            self.cache[key] = WorldSpec.model_validate_json(raw)
        return self.cache[key]

    def world(self, stage: str, names: tuple[str, ...]) -> World:
        """The world from the work folder; outside the confined worker its tool code runs in there."""
        return confine.load_world({n: self.work.read(n, stage) for n in names})

    def tasks(self, stage: str) -> list[Task]:
        raw = self.work.read("tasks.jsonl", stage).decode()
        return [Task.model_validate_json(line) for line in raw.splitlines() if line.strip()]


# --- makes ---------------------------------------------------------------------------------------

def make_brief(ctx: BuildContext) -> dict[str, int]:
    brief = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    ctx.work.write("brief.json", (brief.model_dump_json(indent=1) + "\n").encode())
    return {"modules": len(brief.modules), "rules": len(brief.rules), "departments": len(brief.departments)}


def make_schema(ctx: BuildContext) -> dict[str, int]:
    spec = build_spec(ctx.brief("world_schema"), ctx.templates)
    ctx.work.write("spec.json", (spec.model_dump_json(indent=1, by_alias=True) + "\n").encode())
    ctx.work.write("schema.sql", schema_sql(spec).encode())
    return {"tables": len(spec.tables), "columns": sum(len(t.columns) for t in spec.tables),
            "foreign_keys": sum(1 for t in spec.tables for c in t.columns if c.ref)}


def make_seed(ctx: BuildContext) -> dict[str, int]:
    spec = ctx.spec("seed_database")
    image = build_seed_db(spec, ctx.templates.vocabulary)
    ctx.work.write("seed.db", image)
    return {"bytes": len(image), "tables": len(spec.tables)}


def make_tools(ctx: BuildContext) -> dict[str, int]:
    spec = ctx.spec("world_tools")
    image = ctx.work.read("seed.db", "world_tools")
    tools = tool_specs(spec)
    probes = probes_for(spec, tools, image)
    for t in tools:
        t.examples = probes[t.name]
    ctx.work.write("tools.py", tools_source(spec, tools).encode())
    ctx.work.write("tools.json", tools_json(tools).encode())
    return {"tools": len(tools), "read_only": sum(t.read_only for t in tools),
            "destructive": sum(t.destructive for t in tools)}


def make_tasks(ctx: BuildContext) -> dict[str, int]:
    spec = ctx.spec("world_tasks")
    names = {t["name"] for t in json.loads(ctx.work.read("tools.json", "world_tasks"))}
    world = ctx.world("world_tasks", ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json"))

    def replays(task: Task) -> bool:  # a task is only added if its oracle runs cleanly on a fresh seed copy
        return not run_oracle(world, task).failure

    tasks = generate_tasks(spec, names, ctx.work.read("seed.db", "world_tasks"), replays)
    ctx.work.write("tasks.jsonl", "".join(t.model_dump_json() + "\n" for t in tasks).encode())
    steps = sorted(len(t.oracle) for t in tasks)
    return {"tasks": len(tasks), "families": len({t.family for t in tasks}),
            "oracle_steps_max": steps[-1] if steps else 0, "oracle_steps_total": sum(steps)}


def make_verifiers(ctx: BuildContext) -> dict[str, int]:
    world = ctx.world("world_verifiers", ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py",
                                          "tools.json", "tasks.jsonl"))
    verifiers = build_verifiers(world, list(world.tasks.values()))
    world.use_verifiers(json.loads(json.dumps(verifiers, default=str)))  # as verifiers.json will read back
    reports = check_world(world)
    dropped = {r.task_id: r.problems for r in reports if not r.valid}
    if dropped:  # a task whose grader can be fooled is not served
        verifiers["tasks"] = {k: v for k, v in verifiers["tasks"].items() if k not in dropped}
        verifiers["dropped"] = dropped
    verifiers["validity"] = summary(reports)
    ctx.work.write("verifiers.json", verifiers_json(verifiers).encode())
    ctx.work.write("verifier_report.jsonl", report_jsonl(reports).encode())
    v = verifiers["validity"]
    return {"verifiers": len(verifiers["tasks"]), "dropped": len(dropped), "mutants": v["mutants"],
            "mutants_caught": v["caught"], "mutants_equivalent": v["equivalent"], "mutants_missed": v["missed"]}


def make_rollouts(ctx: BuildContext) -> dict[str, int]:
    """k rollouts per task with the configured policy; rows to the rollouts and traces catalogs."""
    from worldfactory.catalog import write_policy_rows
    from worldfactory.rollouts import histogram, pass_rates, rollout_rows, run_rollouts, trace_rows

    world = ctx.world("task_rollouts", WORLD_FILES)
    cfg = ctx.rollout
    rollouts = run_rollouts(world, cfg)  # raises before anything is written if a model server keeps failing
    rates = pass_rates(rollouts)
    ctx.usage.llm_prompt_tokens += sum(r.prompt_tokens for r in rollouts)
    ctx.usage.llm_completion_tokens += sum(r.completion_tokens for r in rollouts)
    ctx.usage.cost_usd += round(sum(r.cost_usd for r in rollouts), 6)
    catalog = ctx.data_root / "catalog"
    write_policy_rows(catalog, "traces", ctx.world_id, cfg.label, trace_rows(rollouts))
    write_policy_rows(catalog, "rollouts", ctx.world_id, cfg.label, rollout_rows(rollouts))
    summary = {"policy": cfg.label, "k": cfg.k, "histogram": histogram(rates),
               "pass_rates": {tid: [p, n] for tid, (p, n) in rates.items()}}
    if cfg.policy != "openai":  # a model's run is not reproducible; a synthetic one is, byte for byte
        summary["reproducible"] = True
    ctx.work.write("rollouts.json", (json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
    return {"rollouts": len(rollouts), "tasks": len(rates), "steps": sum(r.steps for r in rollouts),
            **{f"pass_rate {b}": n for b, n in summary["histogram"].items()}}


def make_curated(ctx: BuildContext) -> dict[str, int]:
    from worldfactory.rollouts import curate

    summary = json.loads(ctx.work.read("rollouts.json", "curated_tasks"))
    rates = {tid: (p, n) for tid, (p, n) in summary["pass_rates"].items()}
    families = {t.task_id: t.family for t in ctx.tasks("curated_tasks")}
    kept = curate(rates, families)
    ctx.work.write("curated_tasks.jsonl", "".join(json.dumps(row, sort_keys=True) + "\n" for row in kept).encode())
    return {"kept": len(kept), "dropped_all_pass": sum(1 for p, n in rates.values() if p == n),
            "dropped_all_fail": sum(1 for p, _ in rates.values() if p == 0)}


def _require_proofs(ctx: BuildContext) -> dict[str, Proof]:
    """Every upstream stage must be proven, on exactly the files now in the work folder."""
    proofs: dict[str, Proof] = {}
    for stage in STAGES[:-1]:
        proof = ctx.work.proof(stage.name)
        if proof is None:
            raise StageError(f"{ctx.world_id}: {stage.name} has not been proven; run its check "
                             f"'{stage.check}' before building the bundle")
        if not proof.passed:
            raise StageError(f"{ctx.world_id}: {stage.name} failed its check '{stage.check}': {proof.reason}")
        if proof.files != ctx.work.hashes(tuple(proof.files)):
            raise StageError(f"{ctx.world_id}: the proof of {stage.name} is stale (its files changed since); "
                             f"run its check '{stage.check}' again")
        proofs[stage.name] = proof
    return proofs


def make_bundle(ctx: BuildContext) -> dict[str, int]:
    from worldfactory.catalog import write_world_rows

    proofs = _require_proofs(ctx)
    spec = ctx.spec("world_bundle")
    files = ctx.work.files(BUNDLE_FILES[:-2])
    tools = tool_specs(spec)
    served = json.loads(files["verifiers.json"])
    tasks = [t for t in ctx.tasks("world_bundle") if t.task_id in served["tasks"]]
    seed = proofs["seed_database"].details
    row_counts = {t.name: int(seed[f"rows.{t.name}"]) for t in spec.tables}
    v = proofs["world_verifiers"].details
    verification = {"tasks": int(v["tasks"]), "oracle_pass": int(v["oracle_pass"]), "null_pass": int(v["null_pass"])}
    manifest = world_manifest(spec, files, tools, tasks, int(seed["rows"]), verification, ctx.inputs)
    manifest["verifier_validity"] = served.get("validity", {})
    rollouts = json.loads(files["rollouts.json"])
    manifest["counts"]["curated_tasks"] = int(proofs["curated_tasks"].details["kept"])
    manifest["pass_band"] = {"policy": rollouts["policy"], "k": rollouts["k"], "histogram": rollouts["histogram"]}
    for stage_name, cost in sorted(ctx.work.costs().items()):  # tokens and dollars; seconds stay in the catalog
        manifest["costs"][stage_name] = {k: getattr(cost, k) for k in
                                         ("cost_usd", "llm_prompt_tokens", "llm_completion_tokens", "corrections")}
    readme = world_readme(spec, manifest, row_counts, tools, tasks).encode()
    manifest["files"]["README.md"] = sha256(readme)
    ctx.work.write("README.md", readme)
    raw_manifest = (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode()
    ctx.work.write("world.json", raw_manifest)

    worlds = ctx.data_root / "worlds"
    worlds.mkdir(parents=True, exist_ok=True)
    staging = worlds / f".staging-{ctx.world_id}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for name in BUNDLE_FILES:
            shutil.copyfile(ctx.work.path / name, staging / name)
        publish(staging, worlds / ctx.world_id)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    write_world_rows(ctx.data_root / "catalog", manifest, tasks, str(worlds / ctx.world_id))
    return {"files": len(BUNDLE_FILES), "bytes": sum((worlds / ctx.world_id / n).stat().st_size
                                                      for n in BUNDLE_FILES)}


# --- proofs (raise on failure; run_prove turns that into a failed Proof) -------------------------

def prove_brief(ctx: BuildContext) -> dict[str, int | float | str]:
    brief = ctx.brief("world_brief")
    expected = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    if brief != expected:
        raise StageError("brief.json does not match the brief its world ID and templates give")
    return {"rules": len(brief.rules), "modules": len(brief.modules)}


def prove_schema(ctx: BuildContext) -> dict[str, int | float | str]:
    spec = ctx.spec("world_schema")
    return dict(check_schema(spec, ctx.work.read("schema.sql", "world_schema").decode()))


def prove_seed(ctx: BuildContext) -> dict[str, int | float | str]:
    report = check_seed(ctx.spec("seed_database"), ctx.work.read("seed.db", "seed_database"))
    out: dict[str, int | float | str] = {"rows": report["rows"], "invariants": report["invariants"]}
    out.update({f"rows.{k}": v for k, v in report["row_counts"].items()})
    return out


def prove_tools(ctx: BuildContext) -> dict[str, int | float | str]:
    for name in ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json"):
        ctx.work.read(name, "world_tools")
    report = check_tools_in_sandbox(ctx.work.path)
    return {k: v for k, v in report.items() if isinstance(v, int | float | str)}


def prove_tasks(ctx: BuildContext) -> dict[str, int | float | str]:
    world = ctx.world("world_tasks", ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py",
                                      "tools.json", "tasks.jsonl"))
    if not world.tasks:
        raise StageError("the world has no tasks")
    calls = 0
    for task in world.tasks.values():  # the run the tasks stage made, when it ran in this process
        failure = run_oracle(world, task).failure
        if failure:
            raise VerifierError(f"task {task.task_id}: {failure}")
        calls += len(task.oracle)
    families = Counter(t.family for t in world.tasks.values())
    return {"tasks": len(world.tasks), "oracle_calls": calls, **{f"family.{k}": v for k, v in sorted(families.items())}}


def prove_verifiers(ctx: BuildContext) -> dict[str, int | float | str]:
    """Oracle 1 and null 0 for every served task, and a validity report that backs every one of them."""
    world = ctx.world("world_verifiers", ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py",
                                          "tools.json", "tasks.jsonl", "verifiers.json", "verifier_report.jsonl"))
    details: dict[str, int | float | str] = dict(check_verifiers(world))
    rows = [json.loads(line) for line in world.files["verifier_report.jsonl"].decode().splitlines() if line]
    by_id = {r["task_id"]: r for r in rows}
    for task_id in world.tasks:
        row = by_id.get(task_id)
        if row is None or not row["valid"]:
            raise VerifierError(f"task {task_id} is served but its validity report is missing or failed")
    missed = sum(r["missed"] for r in rows if r["task_id"] in world.tasks)
    if missed:
        raise VerifierError(f"{missed} mutants that differ from gold pass their verifier")
    v = world.verifiers.get("validity", {})
    details.update({"caught_mutant_rate": float(v.get("caught_rate", 0.0)), "mutants": int(v.get("mutants", 0)),
                    "mutants_caught": int(v.get("caught", 0)), "mutants_equivalent": int(v.get("equivalent", 0)),
                    "tasks_dropped": int(v.get("dropped", 0)), "reordered_pass": int(v.get("reordered_pass", 0))})
    return details


def prove_rollouts(ctx: BuildContext) -> dict[str, int | float | str]:
    """Every task has k rollouts, and recorded traces replay identically step by step on fresh state."""
    from worldfactory.catalog import read_world_rows
    from worldfactory.rollouts import replay_rows

    world = ctx.world("task_rollouts", WORLD_FILES)
    summary = json.loads(ctx.work.read("rollouts.json", "task_rollouts"))
    missing = [t for t in world.tasks if t not in summary["pass_rates"]]
    if missing:
        raise StageError(f"{len(missing)} tasks have no rollouts, e.g. {missing[0]}")
    rows = read_world_rows(ctx.data_root / "catalog", "traces", ctx.world_id, summary["policy"])
    episodes: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        episodes.setdefault((row["task_id"], row["rollout"]), []).append(row)
    sample = sorted(episodes)[:: max(1, len(episodes) // REPLAY_SAMPLE)][:REPLAY_SAMPLE]
    differ = [line for key in sample for line in replay_rows(world, episodes[key])]
    if differ:
        raise StageError(f"{len(differ)} replayed steps differ from their traces, first: {differ[0]}")
    return {"tasks": len(summary["pass_rates"]), "replayed_episodes": len(sample),
            "replayed_steps": sum(len(episodes[k]) for k in sample), "policy": summary["policy"]}


def prove_curated(ctx: BuildContext) -> dict[str, int | float | str]:
    summary = json.loads(ctx.work.read("rollouts.json", "curated_tasks"))
    lines = ctx.work.read("curated_tasks.jsonl", "curated_tasks").decode().splitlines()
    kept = [json.loads(line) for line in lines if line.strip()]
    for row in kept:
        p, n = summary["pass_rates"][row["task_id"]]
        if not 0 < row["pass_rate"] < 1 or row["pass_rate"] != round(p / n, 4) or row["rollouts"] != n:
            raise StageError(f"curated task {row['task_id']} does not match its rollouts")
    expected = sum(1 for p, n in summary["pass_rates"].values() if 0 < p < n)
    if expected != len(kept):
        raise StageError(f"{expected} tasks are in the pass band but {len(kept)} were kept")
    return {"kept": len(kept), "tasks": len(summary["pass_rates"])}


def prove_bundle(ctx: BuildContext) -> dict[str, int | float | str]:
    dest = ctx.data_root / "worlds" / ctx.world_id
    world = confine.open_world(dest)  # checks every file against world.json
    listed = world.manifest.get("files", {})
    for name, digest in listed.items():
        if sha256((dest / name).read_bytes()) != digest:
            raise StageError(f"{dest / name}: its hash differs from world.json")
    return {"files": len(listed), "tasks": len(world.tasks), "content_hash": world.content_hash}


@dataclass(frozen=True)
class Stage:
    name: str
    check: str
    proves: str  # what the check shows, for docs and the UI
    make: Callable[[BuildContext], dict[str, int]]
    prove: Callable[[BuildContext], dict[str, int | float | str]]
    files: tuple[str, ...]  # the files this stage writes (and its proof covers)


STAGES: tuple[Stage, ...] = (
    Stage("world_brief", "brief_valid", "brief.json validates and matches its seed", make_brief, prove_brief,
          ("brief.json",)),
    Stage("world_schema", "schema_loads", "the DDL loads into an empty SQLite, names are unique, the FK graph "
          "is connected", make_schema, prove_schema, ("spec.json", "schema.sql")),
    Stage("seed_database", "seed_integrity", "integrity_check, foreign_key_check, CHECKs and invariants hold",
          make_seed, prove_seed, ("seed.db",)),
    Stage("world_tools", "tools_sandboxed", "every tool imports and answers its valid and invalid probe calls "
          "in the sandbox", make_tools, prove_tools, ("tools.py", "tools.json")),
    Stage("world_tasks", "oracles_run", "every oracle plan runs on a fresh seed copy without error",
          make_tasks, prove_tasks, ("tasks.jsonl",)),
    Stage("world_verifiers", "verifiers_valid", "every oracle scores 1, doing nothing scores 0, every mutant "
          "that differs from gold scores 0, reordered independent steps still score 1",
          make_verifiers, prove_verifiers, ("verifiers.json", "verifier_report.jsonl")),
    Stage("task_rollouts", "traces_replay", "every task has k rollouts and sampled traces replay identically",
          make_rollouts, prove_rollouts, ("rollouts.json",)),
    Stage("curated_tasks", "pass_band", "the kept tasks are exactly those with a pass rate strictly between 0 "
          "and 1", make_curated, prove_curated, ("curated_tasks.jsonl",)),
    Stage("world_bundle", "bundle_complete", "the published bundle opens and its files match world.json",
          make_bundle, prove_bundle, ("README.md", "world.json")),
)
STAGE_BY_NAME = {s.name: s for s in STAGES}


def _cpu() -> float:
    """This process's CPU seconds plus its confined worker's (which runs the stages that execute tools)."""
    return time.process_time() + confine.worker_cpu_seconds()


def run_make(stage: Stage, ctx: BuildContext) -> StageReport:
    """Run one stage's make, timing it; its proof is cleared until the check runs again."""
    ctx.work.clear_proof(stage.name)
    ctx.usage = StageCost()
    wall, cpu = time.perf_counter(), _cpu()
    counts = confine.run_stage(stage, "make", ctx)
    cost = ctx.usage.model_copy(update={"cpu_seconds": round(_cpu() - cpu, 6),
                                        "wall_seconds": round(time.perf_counter() - wall, 6)})
    ctx.work.write_cost(stage.name, cost)
    return StageReport(world_id=ctx.world_id, stage=stage.name, files=ctx.work.hashes(stage.files), counts=counts,
                       cost=cost)


def run_prove(stage: Stage, ctx: BuildContext) -> Proof:
    """Run one stage's proof and record it; any failure becomes a failed Proof with the reason.

    The proof's time is added to the stage's cost record: proving is part of what a stage costs.
    """
    files = ctx.work.hashes(stage.files)
    wall, cpu = time.perf_counter(), _cpu()
    try:
        details = confine.run_stage(stage, "prove", ctx)
        proof = Proof(world_id=ctx.world_id, stage=stage.name, check=stage.check, passed=True, details=details,
                      files=files)
    except Exception as exc:  # the reason goes into the check's metadata; the check fails
        proof = Proof(world_id=ctx.world_id, stage=stage.name, check=stage.check, passed=False,
                      reason=f"{type(exc).__name__}: {exc}"[:4000], files=files)
    ctx.work.write_proof(proof)
    cost = ctx.work.costs().get(stage.name, StageCost())
    cost.cpu_seconds = round(cost.cpu_seconds + _cpu() - cpu, 6)
    cost.wall_seconds = round(cost.wall_seconds + time.perf_counter() - wall, 6)
    ctx.work.write_cost(stage.name, cost)
    from worldfactory.catalog import write_cost_rows

    write_cost_rows(ctx.data_root / "catalog", ctx.world_id, ctx.work.costs())
    return proof


@functools.cache
def engine_fingerprint() -> str:
    """Hash of the engine's own source: a world is up to date only if this and the templates match."""
    root = Path(worldfactory.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def inputs_fingerprint(templates: TemplateSet, world_id: str = "", briefs_dir: Path | None = None) -> str:
    """Code + the template files this world reads + its brief file: see worldfactory.fingerprints."""
    from worldfactory.fingerprints import world_inputs_fingerprint

    return world_inputs_fingerprint(templates, world_id, briefs_dir)

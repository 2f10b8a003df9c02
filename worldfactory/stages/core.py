"""What every stage shares: the Stage declaration, the work folder, the context, proofs and costs.

A stage is declared once, in its own module under worldfactory/stages/, as a Stage: its name,
its check, what it reads and writes, its make (writes its files into the world's work folder)
and its prove (checks them). worldfactory/stages/__init__.py lists the stages in order; the
engine's build_world, the Dagster assets and checks, the bundle and the docs all read that list.
A proof is recorded with the hashes of the files it covered, and the bundle stage refuses inputs
whose proof is missing, failed or stale: a world is only published from proven stages, whichever
way its stages were run (engine or Dagster, one process or several).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from worldfactory import confine
from worldfactory.generate.bundle import sha256
from worldfactory.rollouts import RolloutConfig
from worldfactory.runtime.world import World, parsed_spec, parsed_tasks
from worldfactory.spec import Brief, Task, Vocabulary, WorldSpec
from worldfactory.templates import TemplateSet


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
    failed_checks: list[str] = Field(default_factory=list)  # the stage's check and gates that failed

    def check_passed(self, name: str) -> bool:
        """Whether one of the stage's checks passed (a proof recorded before gates: its one outcome)."""
        return name not in self.failed_checks if self.failed_checks else self.passed


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

    def files(self, names: tuple[str, ...]) -> dict[str, bytes]:
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

    def corrections(self) -> dict[str, int]:
        """A model-drafted world's repairs by the stage that failed (drafting.json, written by world_brief)."""
        path = self.path / "drafting.json"
        return dict(json.loads(path.read_bytes()).get("corrections", {})) if path.is_file() else {}

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
    vocabulary: Vocabulary | None = None  # the templates' words; given alone where templates are not (a worker)

    def __post_init__(self) -> None:
        if self.vocabulary is None and self.templates is not None:
            self.vocabulary = self.templates.vocabulary

    def brief(self, stage: str) -> Brief:
        return Brief.model_validate_json(self.work.read("brief.json", stage))

    def spec(self, stage: str) -> WorldSpec:
        return parsed_spec(self.work.read("spec.json", stage))

    def world(self, stage: Stage, names: tuple[str, ...] | None = None) -> World:
        """The world from the files a stage reads (or `names`); outside the confined worker its tool code
        runs in there."""
        return confine.load_world({n: self.work.read(n, stage.name) for n in (names or stage.reads)})

    def tasks(self, stage: str) -> list[Task]:
        return list(parsed_tasks(self.work.read("tasks.jsonl", stage)))


@dataclass(frozen=True)
class Gate:
    """A blocking check of its own, beside the stage's proof: a figure the proof counts (`passed` of
    `total` in its details) that must be whole. Declared on the stage, so the engine enforces it and the
    Dagster layer makes it a check from the same declaration."""

    check: str
    proves: str
    passed: str  # the proof's detail that counts what passed
    total: str  # the proof's detail that counts everything tried
    examples: str = ""  # the proof's detail that names some that failed, for the reason

    def failure(self, details: dict[str, int | float | str]) -> str:
        """Why the gate fails on these details, or "" when it holds."""
        if self.passed not in details or self.total not in details:
            return f"{self.check}: the proof did not count {self.passed} of {self.total}"
        done, total = details[self.passed], details[self.total]
        if done == total:
            return ""
        why = f": {details[self.examples]}" if self.examples and details.get(self.examples) else ""
        return f"{self.check}: {self.passed} {done} of {self.total} {total}{why}"


@dataclass(frozen=True)
class Stage:
    """One stage, declared once next to its code (see the modules of worldfactory/stages/)."""

    name: str  # the Dagster asset key too
    check: str  # the name of its proof, a blocking asset check in Dagster
    proves: str  # what the check shows, for docs and the UI
    make: Callable[[BuildContext], dict[str, int]]
    prove: Callable[[BuildContext], dict[str, int | float | str]]
    writes: tuple[str, ...]  # the bundle files this stage writes (and its proof covers)
    reads: tuple[str, ...] = ()  # the files of earlier stages it reads
    confined: tuple[str, ...] = ()  # its steps ("make", "prove") that execute generated tool code: they run
    #                                 in the confined worker (worldfactory.confine)
    uses_model: bool = False  # it may call a model server (rate limits, retries, the llm_api pool)
    publish: Callable[[BuildContext], None] | None = None  # what it puts where others see it: run by run_prove,
    #                                                        only once its proof has passed
    gates: tuple[Gate, ...] = ()  # blocking checks of their own on figures its proof counts
    make_here: Callable[[BuildContext], bool] | None = None  # a confined make that runs in this process
    #   when this says so (a model policy's rollouts need the network; their episodes still run confined)

    @property
    def checks(self) -> tuple[str, ...]:
        """Every blocking check of this stage: its proof's, then its gates'."""
        return (self.check, *(g.check for g in self.gates))


_REGISTERED: list[Stage] = []  # STAGES, in order, as stages/__init__.py hands them down (register_stages)


def register_stages(stages: tuple[Stage, ...]) -> None:
    """The registry (stages/__init__.py) hands STAGES down once it has them, so the one stage that needs the
    whole list (world_bundle: every upstream proof, the bundle's files, the manifest's cost rows) reads it here
    instead of importing the registry that imports it."""
    _REGISTERED[:] = stages


def registered_stages() -> tuple[Stage, ...]:
    """STAGES in order; the package worldfactory.stages registers them when it is imported, which importing
    any of its modules does first."""
    if not _REGISTERED:
        raise StageError("no stages registered: worldfactory/stages/__init__.py registers STAGES")
    return tuple(_REGISTERED)


def run_stage(stage: Stage, kind: str, ctx: BuildContext) -> Any:
    """A stage's make or prove: in the confined worker when its declaration says that step executes
    generated code (Stage.confined; world_tools' proof runs the probes job itself), else here. The
    worker's side is the `stage` job (worldfactory/stages/__init__.py registers it)."""
    fn = getattr(stage, kind)
    if kind not in stage.confined or not confine.confined_here():
        return fn(ctx)
    if kind == "make" and stage.make_here is not None and stage.make_here(ctx):
        return fn(ctx)
    out = confine.worker().request(
        "stage", stage=stage.name, kind=kind, world_id=ctx.world_id, work=str(ctx.work.path),
        data_root=str(ctx.data_root), briefs_dir=str(ctx.briefs_dir) if ctx.briefs_dir else None,
        inputs=ctx.inputs, rollout=ctx.rollout.model_dump(),
        vocabulary=ctx.vocabulary.model_dump(mode="json") if ctx.vocabulary else None)
    for name, data in out["writes"].items():
        ctx.work.write(_safe_name(name), data)
    for key, value in out["usage"].items():
        if key in ("llm_prompt_tokens", "llm_completion_tokens", "cost_usd", "corrections"):
            setattr(ctx.usage, key, value)
    return out["result"]


def _safe_name(name: str) -> str:
    if not isinstance(name, str) or "/" in name or name.startswith(".") or not name:
        raise confine.ConfinementError(f"the confined worker asked to write {name!r:.80}; refused")
    return name


def _cpu() -> float:
    """This process's CPU seconds plus its confined worker's (which runs the stages that execute tools)."""
    return time.process_time() + confine.worker_cpu_seconds()


def run_make(stage: Stage, ctx: BuildContext) -> StageReport:
    """Run one stage's make, timing it; its proof is cleared until the check runs again."""
    ctx.work.clear_proof(stage.name)
    ctx.usage = StageCost()
    wall, cpu = time.perf_counter(), _cpu()
    counts = run_stage(stage, "make", ctx)
    cost = ctx.usage.model_copy(update={"cpu_seconds": round(_cpu() - cpu, 6),
                                        "wall_seconds": round(time.perf_counter() - wall, 6),
                                        "corrections": ctx.work.corrections().get(stage.name, ctx.usage.corrections)})
    ctx.work.write_cost(stage.name, cost)
    return StageReport(world_id=ctx.world_id, stage=stage.name, files=ctx.work.hashes(stage.writes), counts=counts,
                       cost=cost)


def run_prove(stage: Stage, ctx: BuildContext) -> Proof:
    """Run one stage's proof and record it; any failure becomes a failed Proof with the reason.

    A stage that publishes (world_bundle) publishes here, after its proof passed and only then, so
    that every path that runs stages (the engine's build_world, the Dagster assets, drafting) publishes
    proven worlds alone. A publish that fails fails the proof. The proof's time is added to the stage's
    cost record: proving is part of what a stage costs.
    """
    files = ctx.work.hashes(stage.writes)
    wall, cpu = time.perf_counter(), _cpu()
    try:
        details = run_stage(stage, "prove", ctx)
        failures = {g.check: why for g in stage.gates if (why := g.failure(details))}
        if failures:  # a gate that fails fails the world like the proof does; its own check says why
            proof = Proof(world_id=ctx.world_id, stage=stage.name, check=stage.check, passed=False, details=details,
                          reason="; ".join(failures.values())[:4000], files=files, failed_checks=sorted(failures))
        else:
            if stage.publish is not None:
                stage.publish(ctx)
            proof = Proof(world_id=ctx.world_id, stage=stage.name, check=stage.check, passed=True, details=details,
                          files=files)
    except Exception as exc:  # the reason goes into the check's metadata; the check fails, and its gates with it
        proof = Proof(world_id=ctx.world_id, stage=stage.name, check=stage.check, passed=False,
                      reason=f"{type(exc).__name__}: {exc}"[:4000], files=files, failed_checks=list(stage.checks))
    ctx.work.write_proof(proof)
    if not proof.passed:  # the catalog says the last build failed; a bundle published before stays as it was
        from worldfactory.catalog import record_failed_build

        record_failed_build(ctx.data_root, ctx.world_id, stage.name, stage.check, proof.reason, ctx.inputs)
    cost = ctx.work.costs().get(stage.name, StageCost())
    cost.cpu_seconds = round(cost.cpu_seconds + _cpu() - cpu, 6)
    cost.wall_seconds = round(cost.wall_seconds + time.perf_counter() - wall, 6)
    ctx.work.write_cost(stage.name, cost)
    from worldfactory.catalog import write_cost_rows

    write_cost_rows(ctx.data_root / "catalog", ctx.world_id, ctx.work.costs())
    return proof


def inputs_fingerprint(templates: TemplateSet, world_id: str = "", briefs_dir: Path | None = None) -> str:
    """Code + the template files this world reads + its brief file: see worldfactory.fingerprints."""
    from worldfactory.fingerprints import world_inputs_fingerprint

    return world_inputs_fingerprint(templates, world_id, briefs_dir)

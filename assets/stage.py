"""The shape every per-world stage shares: an asset that runs the stage's make, then its proof as a blocking check.

Both are thin: the engine does the work and the WorldStore says where; the asset reports counts,
file hashes and cost as metadata (zeros on the offline path are measured zeros), and the check
puts its reason in its metadata when it fails, which stops that world's downstream stages.
"""

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

import dagster as dg

from pipelines.partitions import world_partitions
from resources.world_store import WorldStore
from worldfactory.build.stages import STAGE_BY_NAME, Proof, StageReport, run_make, run_prove

# `worldfactory build` sets this to move its progress bar; Dagster runs elsewhere leave it unset.
PROGRESS: ContextVar[Callable[[str, str], None] | None] = ContextVar("worldfactory_progress", default=None)
NIGHTLY_CRON = "0 3 * * *"
NIGHTLY = dg.AutomationCondition.on_cron(NIGHTLY_CRON, cron_timezone="UTC")
GROUP = "world"


def report_metadata(report: StageReport, store: WorldStore) -> dict[str, Any]:
    c = report.cost
    meta: dict[str, Any] = {
        "world_id": report.world_id,
        "path": dg.MetadataValue.path(str(store.work(report.world_id).path)),
        "cpu_seconds": dg.MetadataValue.float(c.cpu_seconds),
        "wall_seconds": dg.MetadataValue.float(c.wall_seconds),
        "llm_prompt_tokens": dg.MetadataValue.int(c.llm_prompt_tokens),
        "llm_completion_tokens": dg.MetadataValue.int(c.llm_completion_tokens),
        "cost_usd": dg.MetadataValue.float(c.cost_usd),
        "corrections": dg.MetadataValue.int(c.corrections),
    }
    meta.update({name: dg.MetadataValue.int(v) for name, v in sorted(report.counts.items())})
    meta.update({f"sha256/{name}": dg.MetadataValue.text(h) for name, h in sorted(report.files.items())})
    return meta


def proof_metadata(proof: Proof) -> dict[str, Any]:
    meta: dict[str, Any] = {"world_id": proof.world_id, "passed": proof.passed}
    if proof.reason:
        meta["reason"] = dg.MetadataValue.md(f"```\n{proof.reason}\n```")
    for key, value in sorted(proof.details.items()):
        meta[key] = value
    return meta


def stage_asset(name: str, deps: Sequence[dg.AssetsDefinition]) -> dg.AssetsDefinition:
    """The asset for one engine stage, with its proof as a blocking asset check.

    The check runs in the asset's own step (a check spec), not as a separate step: each step
    costs Dagster a handful of event-log writes, and a world's stages are short, so this halves
    the orchestration overhead. A failed check still records the materialization and the reason,
    fails the step and keeps that world's downstream stages from running.
    """
    stage = STAGE_BY_NAME[name]
    spec = dg.AssetCheckSpec(stage.check, asset=stage.name, blocking=True, description=stage.proves)

    @dg.asset(name=stage.name, partitions_def=world_partitions, deps=list(deps), group_name=GROUP,
              kinds={"python", "sqlite"}, automation_condition=NIGHTLY, check_specs=[spec],
              description=f"{stage.name}: writes {', '.join(stage.files)}. Proof: {stage.proves}.")
    def _asset(context: dg.AssetExecutionContext, world_store: WorldStore) -> dg.MaterializeResult:
        world_id = context.partition_key
        hook = PROGRESS.get()
        if hook is not None:
            hook(world_id, stage.name)
        ctx = world_store.context(world_id)
        report = run_make(stage, ctx)
        proof = run_prove(stage, ctx)
        if not proof.passed:
            context.log.error(f"{world_id}: check {stage.check} failed: {proof.reason}")
        check = dg.AssetCheckResult(check_name=stage.check, passed=proof.passed,
                                    severity=dg.AssetCheckSeverity.ERROR, metadata=proof_metadata(proof))
        report.cost = ctx.work.costs()[stage.name]  # make + proof
        return dg.MaterializeResult(metadata=report_metadata(report, world_store), check_results=[check])

    return _asset

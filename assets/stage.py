"""The shape every per-world stage shares: an asset that runs the stage's make, then its proof as a blocking check.

Both are thin: the engine does the work and the WorldStore says where; the asset reports counts,
file hashes and cost as metadata (zeros on the offline path are measured zeros), and the check
puts its reason in its metadata when it fails, which stops that world's downstream stages.
"""

from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import dagster as dg

# the pointer from a check evaluation to the materialization it checked; dagster exports no public name for it
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData

from worldfactory.generate.page import PAGE
from worldfactory.stages import STAGES
from worldfactory.stages.core import Proof, Stage, StageReport, run_make, run_prove
from worldfactory_dagster.assets.versions import FORCE_TAG, INPUTS_KEY, code_version, nightly_condition, stale_worlds
from worldfactory_dagster.pipelines.partitions import world_backfill_policy, world_partitions
from worldfactory_dagster.resources.policy import RolloutPolicy
from worldfactory_dagster.resources.world_store import WorldStore

# `worldfactory build` sets this to move its progress bar; Dagster runs elsewhere leave it unset.
PROGRESS: ContextVar[Callable[[str, str], None] | None] = ContextVar("worldfactory_progress", default=None)
GROUP = "world"


def bundle_path(store: WorldStore, world_id: str) -> Path:
    """Where the world's published bundle lives (data/worlds/<id>/), not its work folder."""
    return (store.data_root / "worlds" / world_id).resolve()


def report_metadata(report: StageReport, store: WorldStore) -> dict[str, Any]:
    c = report.cost
    bundle = bundle_path(store, report.world_id)
    meta: dict[str, Any] = {
        "world_id": report.world_id,
        "path": dg.MetadataValue.path(str(bundle)),
        "cpu_seconds": dg.MetadataValue.float(c.cpu_seconds),
        "wall_seconds": dg.MetadataValue.float(c.wall_seconds),
        "llm_prompt_tokens": dg.MetadataValue.int(c.llm_prompt_tokens),
        "llm_completion_tokens": dg.MetadataValue.int(c.llm_completion_tokens),
        "cost_usd": dg.MetadataValue.float(c.cost_usd),
        "corrections": dg.MetadataValue.int(c.corrections),
    }
    meta.update({name: dg.MetadataValue.int(v) for name, v in sorted(report.counts.items())})
    meta.update({f"sha256/{name}": dg.MetadataValue.text(h) for name, h in sorted(report.files.items())})
    if PAGE in report.files:  # the stage wrote the world's web page: a link to the published copy
        meta["page"] = dg.MetadataValue.url((bundle / PAGE).as_uri())
    meta["summary"] = dg.MetadataValue.md(summary_markdown(report))
    return meta


def summary_markdown(report: StageReport) -> str:
    """A Markdown table of the stage's counts and cost, for the asset's page in the UI."""
    c = report.cost
    rows = [*sorted(report.counts.items()), ("wall seconds", f"{c.wall_seconds:.2f}"),
            ("model tokens", c.llm_prompt_tokens + c.llm_completion_tokens), ("cost (USD)", f"{c.cost_usd:.4f}")]
    return "\n".join([f"**{report.stage}** of `{report.world_id}`", "", "| | |", "|---|---|",
                      *[f"| {k} | {v} |" for k, v in rows]])


def check_metadata(world_id: str, passed: bool, reason: str, counts: dict[str, Any], store: WorldStore
                   ) -> dict[str, Any]:
    """One world's check metadata, the same keys for every check (the stages' proofs and gates, the image's),
    whether it passed or failed and whatever the run size.

    The keys: world_id, passed, reason (empty when it passed), counts (the check's figures, a JSON
    object) and path (the world's published bundle), so "did world X pass?" reads the same in the UI
    for a one-world run and a batch.
    """
    return {"world_id": world_id, "passed": passed,
            "reason": dg.MetadataValue.md(f"```\n{reason}\n```" if reason else ""),
            "counts": dg.MetadataValue.json(dict(sorted(counts.items()))),
            "path": dg.MetadataValue.path(str(bundle_path(store, world_id)))}


def proof_metadata(proof: Proof, store: WorldStore) -> dict[str, Any]:
    """A stage proof's check metadata (check_metadata: counts are the proof's details, empty when it failed)."""
    return check_metadata(proof.world_id, proof.passed, proof.reason, proof.details, store)


def check_evaluations(context: dg.AssetExecutionContext, spec: dg.AssetCheckSpec, proofs: Sequence[Proof],
                      store: WorldStore) -> Iterator[dg.Output | dg.AssetCheckEvaluation]:
    """The check's output, then one evaluation per world, each on its world's partition.

    An AssetCheckResult takes its partition from the run's single partition key, so a run over a
    range of worlds records its check once, on no partition ("Partition —" in the UI). An
    AssetCheckEvaluation names its partition, and a failed blocking one still fails the step. Each
    points at the materialization of its own partition that this run just recorded.
    """
    yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(spec.key))
    latest: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=spec.asset_key, asset_partitions=[p.world_id for p in proofs]),
        limit=len(proofs)).records
    for record in records:
        if record.run_id == context.run.run_id and record.partition_key not in latest:
            latest[record.partition_key] = AssetCheckEvaluationTargetMaterializationData(
                storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
    for proof in proofs:
        passed = proof.check_passed(spec.name)  # a gate can fail while the proof's own check holds, or the reverse
        yield dg.AssetCheckEvaluation(asset_key=spec.asset_key, check_name=spec.name, passed=passed,
                                      metadata={**proof_metadata(proof, store), "passed": passed},
                                      severity=dg.AssetCheckSeverity.ERROR,
                                      blocking=spec.blocking, partition=proof.world_id,
                                      target_materialization_data=latest.get(proof.world_id))


def add_partition_metadata(context: dg.AssetExecutionContext, targeted: Sequence[str],
                           by_partition: dict[str, dict[str, Any]]) -> None:
    """Each world's own metadata on its partition's materialization, in a step over several partitions.

    `context.add_asset_metadata(partition_key=...)` checks the key against the run's partition range on
    every call, and for dynamic partitions that reads every partition key from the instance: about 13 ms
    of CPU with 2,000 worlds registered, once per world and stage. The keys here are the step's own
    (`targeted`: `context.partition_keys`, read once by the caller), so the metadata goes straight to the
    step's accumulator, where add_asset_metadata puts it; a Dagster without that accumulator gets the
    public call.
    """
    unknown = sorted(set(by_partition) - set(targeted))
    if unknown:
        raise dg.DagsterInvariantViolationError(f"metadata for partitions this step does not target: {unknown}")
    step = getattr(context.op_execution_context, "_step_execution_context", None)
    accumulator = getattr(step, "_metadata_accumulator", None)
    if accumulator is None or not hasattr(accumulator, "with_additional_asset_metadata"):
        for key, meta in by_partition.items():
            context.add_asset_metadata(meta, partition_key=key)
        return
    for key, meta in by_partition.items():
        accumulator = accumulator.with_additional_asset_metadata(asset_key=context.asset_key, partition_key=key,
                                                                 metadata=meta)
    step._metadata_accumulator = accumulator


# Stages that may call a model server share the instance-wide `llm_api` concurrency pool (set its
# limit with `dagster instance concurrency set llm_api N`) and retry with exponential backoff when a
# server keeps answering 429 or 5xx after the client's own retries.
LLM_POOL = "llm_api"
LLM_RETRY = dg.RetryPolicy(max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


def stage_assets(upstream: Sequence[dg.AssetKey] = ()) -> list[dg.AssetsDefinition]:
    """One asset per engine stage, in the registry's order (worldfactory.stages.STAGES), each after the last;
    the first after `upstream` (the draft step, assets/draft.py), which its runs may leave out."""
    out: list[dg.AssetsDefinition] = []
    for stage in STAGES:
        out.append(stage_asset(stage, out[-1:] or list(upstream), pool=LLM_POOL if stage.uses_model else None,
                               retry_policy=LLM_RETRY if stage.uses_model else None))
    return out


def stage_asset(stage: Stage, deps: Sequence[dg.AssetsDefinition | dg.AssetKey], pool: str | None = None,
                retry_policy: dg.RetryPolicy | None = None) -> dg.AssetsDefinition:
    """The asset for one engine stage, with its proof as a blocking asset check.

    The check runs in the asset's own step (a check spec), not as a separate step: each step
    costs Dagster a handful of event-log writes, and a world's stages are short, so this halves
    the orchestration overhead. A failed check still records the materialization and the reason,
    fails the step and keeps that world's downstream stages from running.

    A run normally holds one world. A run over a range of world partitions (`worldfactory build
    --batch N`) builds them all in each step, which spreads Dagster's fixed cost per step over N
    worlds; it is all-or-nothing per stage, and the CLI reruns a failed batch one world per run.

    Staleness (assets/versions.py): the stage's code version is the engine's source fingerprint;
    each world's materialization records its inputs fingerprint (metadata, and the data version
    in a one-world run). The first stage skips the whole run when every world in it is already
    current (a backfill over unchanged worlds does nothing), unless the run is tagged
    `worldfactory/force=true`; the stages after it are then skipped by Dagster.
    """
    first = stage is STAGES[0]  # the first stage skips a run of current worlds (its deps may be the draft step)
    # the proof's check, then one per gate the stage declares (a figure its proof counts that must be whole)
    specs = [dg.AssetCheckSpec(name, asset=stage.name, blocking=True, description=proves,
                               partitions_def=world_partitions)
             for name, proves in ((stage.check, stage.proves), *((g.check, g.proves) for g in stage.gates))]

    @dg.asset(name=stage.name, partitions_def=world_partitions, deps=list(deps), group_name=GROUP,
              kinds={"python", "sqlite"}, automation_condition=nightly_condition(), check_specs=specs, pool=pool,
              retry_policy=retry_policy, code_version=code_version(), output_required=not first,
              backfill_policy=world_backfill_policy,
              description=f"{stage.name}: writes {', '.join(stage.writes)}. Proof: {stage.proves}.")
    def _asset(context: dg.AssetExecutionContext, world_store: WorldStore,
               rollout_policy: RolloutPolicy) -> Iterator[dg.MaterializeResult | dg.Output | dg.AssetCheckEvaluation]:
        # every stage gets the policy so its BuildContext is whole; only task_rollouts reads it
        keys = list(context.partition_keys)
        if first and context.run.tags.get(FORCE_TAG) != "true" and not stale_worlds(context.instance, world_store,
                                                                                    keys):
            why = (f"{', '.join(keys)}: up to date (its latest bundle, in Dagster and on disk, has the current "
                   f"inputs fingerprint); not rebuilt. Tag the run {FORCE_TAG}=true to rebuild anyway.")
            context.log.info(why)
            # no materialization: Dagster skips every later stage; each world's check says why (its output is required)
            skipped = [Proof(world_id=k, stage=stage.name, check=stage.check, passed=True, reason=why) for k in keys]
            for spec in specs:
                yield from check_evaluations(context, spec, skipped, world_store)
            return
        hook = PROGRESS.get()
        reports: list[StageReport] = []
        proofs: list[Proof] = []
        inputs: dict[str, str] = {}
        templates, rollout = world_store.templates(), rollout_policy.config()  # once per step, not per world
        for world_id in keys:
            if hook is not None:
                hook(world_id, stage.name)
            ctx = world_store.context(world_id, rollout, templates)
            inputs[world_id] = ctx.inputs
            report = run_make(stage, ctx)
            proofs.append(run_prove(stage, ctx))
            report.cost = ctx.work.costs()[stage.name]  # make + proof
            reports.append(report)
            if not proofs[-1].passed:
                context.log.error(f"{world_id}: check {stage.check} failed: {proofs[-1].reason}")
        # every world's materialization records its own counts, file hashes, cost and inputs fingerprint
        per_world = {r.world_id: {**report_metadata(r, world_store), INPUTS_KEY: inputs[r.world_id]} for r in reports}
        if len(reports) == 1:
            meta = per_world[keys[0]]
        else:
            add_partition_metadata(context, keys, per_world)
            meta = {"worlds_in_run": dg.MetadataValue.int(len(reports))}
        # a one-world run: the world's inputs fingerprint is the data version of this partition
        version = dg.DataVersion(inputs[keys[0]]) if len(keys) == 1 else None
        yield dg.MaterializeResult(metadata=meta, data_version=version)
        for spec in specs:
            yield from check_evaluations(context, spec, proofs, world_store)

    return _asset

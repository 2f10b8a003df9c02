"""pack_draft: a free-text brief's drafted pack, upstream of world_brief, with what it cost as metadata.

Partitioned like the worlds. For a text brief's world it runs the draft step (worldfactory.drafting:
reuse the proven draft recorded for the brief and model, or draft, prove and record one); its
blocking check `draft_proven` stops world_brief when no draft proved. A catalog world or a YAML
brief has nothing to draft: it says so and its check passes. It shares the `llm_api` pool and is
retried with backoff when the model server keeps failing. The `brief_build` job runs it before
every stage; `world_build` (catalog worlds) leaves it out.
"""

# No `from __future__ import annotations` here: Dagster reads the context annotation.
from collections.abc import Iterator
from typing import Any

import dagster as dg

from worldfactory.drafting.client import ModelUnavailable
from worldfactory.drafting.errors import DraftError
from worldfactory.drafting.step import draft_brief
from worldfactory.drafts import DRAFT_STEP, text_brief_file
from worldfactory.stages.core import Proof
from worldfactory_dagster.assets.stage import LLM_POOL, LLM_RETRY, add_partition_metadata, check_evaluations
from worldfactory_dagster.pipelines.partitions import world_backfill_policy, world_partitions
from worldfactory_dagster.resources.world_store import WorldStore

GROUP = "drafting"
CHECK = "draft_proven"
SPEC = dg.AssetCheckSpec(CHECK, asset=DRAFT_STEP, blocking=True, partitions_def=world_partitions,
                         description="a free-text brief's drafted pack proved with every stage")


def _draft_one(world_id: str, store: WorldStore, templates: Any) -> tuple[dict[str, Any], bool, str]:
    """(metadata, passed, reason) of one world's draft step."""
    path = text_brief_file(world_id, store.briefs_dir)
    if path is None:
        return {"world_id": world_id, "drafted": False,
                "summary": dg.MetadataValue.md(f"`{world_id}` is not a free-text brief: its pack comes from "
                                               f"world_templates/, nothing to draft")}, True, ""
    try:
        result = draft_brief(path, templates)
    except ModelUnavailable:
        raise  # the server kept failing: the step fails and is retried (LLM_RETRY)
    except DraftError as exc:
        return {"world_id": world_id, "drafted": False}, False, str(exc)
    rec, spend = result.draft.record, result.spend
    meta: dict[str, Any] = {
        "world_id": world_id, "drafted": True, "reused": result.reused, "model": rec.model,
        "draft": dg.MetadataValue.path(str(result.draft.folder)),
        # what the conversation cost when it was made (the record), and what this run paid (0 when reused/cached)
        "llm_prompt_tokens": dg.MetadataValue.int(rec.prompt_tokens),
        "llm_completion_tokens": dg.MetadataValue.int(rec.completion_tokens),
        "cost_usd": dg.MetadataValue.float(rec.cost_usd),
        "corrections": dg.MetadataValue.int(sum(rec.corrections.values())),
        "corrections_by_stage": dg.MetadataValue.json(dict(sorted(rec.corrections.items()))),
        "attempts": dg.MetadataValue.int(len(rec.attempts)),
        "spent_prompt_tokens": dg.MetadataValue.int(spend.prompt_tokens),
        "spent_completion_tokens": dg.MetadataValue.int(spend.completion_tokens),
        "spent_usd": dg.MetadataValue.float(spend.cost_usd),
        "model_requests": dg.MetadataValue.int(spend.requests - spend.cached),
        "cached_replies": dg.MetadataValue.int(spend.cached),
    }
    return meta, result.proven, rec.error


@dg.asset(name=DRAFT_STEP, partitions_def=world_partitions, group_name=GROUP, kinds={"python", "openai"},
          pool=LLM_POOL, retry_policy=LLM_RETRY, backfill_policy=world_backfill_policy,
          check_specs=[SPEC],
          description="A free-text brief's domain pack, drafted by a model and proven with the pipeline, recorded "
                      "in data/drafts/ (reused while the brief and model stay the same); world_brief reads it.")
def pack_draft(context: dg.AssetExecutionContext, world_store: WorldStore
               ) -> Iterator[dg.MaterializeResult | dg.Output | dg.AssetCheckEvaluation]:
    keys = list(context.partition_keys)
    templates = world_store.templates()
    outcomes = {wid: _draft_one(wid, world_store, templates) for wid in keys}
    if len(keys) == 1:
        yield dg.MaterializeResult(metadata=outcomes[keys[0]][0])
    else:
        add_partition_metadata(context, keys, {wid: outcomes[wid][0] for wid in keys})
        yield dg.MaterializeResult(metadata={"worlds_in_run": dg.MetadataValue.int(len(keys))})
    proofs = []
    for wid in keys:
        _meta, passed, reason = outcomes[wid]
        if not passed:
            context.log.error(f"{wid}: check {CHECK} failed: {reason}")
        proofs.append(Proof(world_id=wid, stage=DRAFT_STEP, check=CHECK, passed=passed, reason=reason))
    yield from check_evaluations(context, SPEC, proofs, world_store)

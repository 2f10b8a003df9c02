"""The `eval_run` asset: evaluation runs in the UI, one partition per run (data/runs/<run id>/).

Runs are started from the command line (`worldfactory eval run`, `rollouts`); the sensor in
pipelines/automation.py adds each new run folder as a partition and materializes it. The engine does
the work (worldfactory.evals.runs.resume: an unfinished run plays only its missing episodes; a
complete one is only summarised); this asset carries its summary as metadata: pass^1 and pass^k per
family, the band per world, the causes as a bar chart, one example episode per cause.
"""

# No `from __future__ import annotations` here: Dagster reads the context and resource annotations.
import os

import dagster as dg

from worldfactory.confine import open_world
from worldfactory.evals import runs
from worldfactory.evals.pages import causes_markdown, families_markdown
from worldfactory.evals.summary import load_summary
from worldfactory_dagster.resources.world_store import WorldStore

GROUP = "evals"
run_partitions = dg.DynamicPartitionsDefinition(name="eval_run")


@dg.asset(name="eval_run", partitions_def=run_partitions, group_name=GROUP, kinds={"parquet"},
          description="An evaluation run: its episodes (resumed where a kill left it), catalog rows, band and "
                      "failure causes; metadata: pass^1/pass^k per family, causes as a bar chart, examples.")
def eval_run(context: dg.AssetExecutionContext, world_store: WorldStore) -> dg.MaterializeResult:
    root = world_store.data_root
    rid = context.partition_key
    info = runs.resume(root, rid, open_world, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
    summary = load_summary(runs.run_dir(root, rid))
    assert summary is not None, f"run {rid} was resumed but has no summary"
    meta: dict = {
        "run_id": rid, "policy": summary.policy, "k": summary.k, "worlds": dg.MetadataValue.json(summary.worlds),
        "episodes": dg.MetadataValue.int(summary.episodes), "passes": dg.MetadataValue.int(summary.passes),
        "pass1": dg.MetadataValue.float(summary.families["all"].pass1.rate),
        "passk": dg.MetadataValue.float(summary.families["all"].passk.rate),
        "band": dg.MetadataValue.json(summary.band), "causes": dg.MetadataValue.json(summary.causes),
        "top_cause": summary.top_cause or "",
        "families": dg.MetadataValue.md(families_markdown(summary)),
        "causes_chart": dg.MetadataValue.md(causes_markdown(summary)),
        "config": dg.MetadataValue.json(info.config.model_dump()),
        "folder": dg.MetadataValue.path(str(runs.run_dir(root, rid))),
    }
    return dg.MaterializeResult(metadata=meta)

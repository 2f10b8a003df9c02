"""Registration sensors (new worlds from the registry and data/briefs/; new evaluation runs from data/runs/)
and the nightly rebuild."""

# No `from __future__ import annotations` here: Dagster reads the context and resource annotations.

import dagster as dg

from worldfactory.drafts import text_brief_file
from worldfactory.evals.runs import list_run_ids
from worldfactory.registry import wanted_worlds
from worldfactory.run_size import WORLDS_PER_RUN
from worldfactory.templates import TemplateError
from worldfactory_dagster.assets.evals import run_partitions
from worldfactory_dagster.assets.stage import GROUP
from worldfactory_dagster.pipelines.jobs import brief_build, eval_runs, world_build
from worldfactory_dagster.pipelines.partitions import RANGE_END, RANGE_START, world_partitions
from worldfactory_dagster.resources.world_store import WorldStore


def range_requests(new: list[str], size: int = WORLDS_PER_RUN, drafted: frozenset[str] = frozenset()
                   ) -> list[dg.RunRequest]:
    """One build run per WORLDS_PER_RUN new worlds, each over a range of partitions (they are added in
    this order, so consecutive ones are a range); a single world gets a plain one-partition run. A free-text
    brief's world (in `drafted`) gets a run of its own, of `brief_build`: its draft step first."""
    out = [dg.RunRequest(partition_key=w, run_key=f"register:{w}", job_name=brief_build.name)
           for w in new if w in drafted]
    new = [w for w in new if w not in drafted]
    for i in range(0, len(new), size):
        group = new[i:i + size]
        if len(group) == 1:
            out.append(dg.RunRequest(partition_key=group[0], run_key=f"register:{group[0]}",
                                     job_name=world_build.name))
        else:
            out.append(dg.RunRequest(run_key=f"register:{group[0]}..{group[-1]}", job_name=world_build.name,
                                     tags={RANGE_START: group[0], RANGE_END: group[-1]}))
    return out


@dg.sensor(jobs=[world_build, brief_build], minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds world IDs from world_templates/registry.yaml and data/briefs/ (*.yaml, *.md) as "
                       f"partitions and requests build runs for the new ones, up to {WORLDS_PER_RUN} worlds a "
                       "run (a free-text brief's world: a brief_build run of its own, its draft step first). Deleted "
                       "worlds stay deleted.")
def world_registry_sensor(context: dg.SensorEvaluationContext, world_store: WorldStore) -> dg.SensorResult:
    try:
        wanted, errors = wanted_worlds(world_store.templates(), world_store.data_root)
    except TemplateError as exc:
        context.log.error(str(exc))
        return dg.SensorResult(skip_reason=f"registry settings are invalid: {exc}")
    for err in errors:
        context.log.error(f"brief file skipped: {err}")
    existing = set(context.instance.get_dynamic_partitions(world_partitions.name))
    new = [w for w in wanted if w not in existing]
    if not new:
        reason = "no new worlds" + (f"; {len(errors)} brief file(s) invalid: {errors[0]}" if errors else "")
        return dg.SensorResult(skip_reason=reason)
    return dg.SensorResult(
        run_requests=range_requests(new, drafted=frozenset(
            w for w in new if text_brief_file(w, world_store.briefs_dir) is not None)),
        dynamic_partitions_requests=[world_partitions.build_add_request(new)],
    )


@dg.sensor(job=eval_runs, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds each new evaluation run (data/runs/<run id>/run.json, started with `worldfactory "
                       "eval run` or `rollouts`) as a partition of eval_run and materializes it: an unfinished "
                       "run is resumed, a complete one summarised for the UI.")
def eval_run_sensor(context: dg.SensorEvaluationContext, world_store: WorldStore) -> dg.SensorResult:
    existing = set(context.instance.get_dynamic_partitions(run_partitions.name))
    new = [rid for rid in list_run_ids(world_store.data_root) if rid not in existing]
    if not new:
        return dg.SensorResult(skip_reason="no new evaluation runs")
    return dg.SensorResult(run_requests=[dg.RunRequest(partition_key=rid, run_key=f"eval:{rid}") for rid in new],
                           dynamic_partitions_requests=[run_partitions.build_add_request(new)])


# `use_user_code_server` is beta in Dagster 1.13 (the custom condition needs it): its warning is off (quiet.py)
nightly_rebuild = dg.AutomationConditionSensorDefinition(
    "nightly_rebuild", target=dg.AssetSelection.groups(GROUP, "catalog"),
    default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=60, use_user_code_server=True,
    description="At 03:00 UTC rebuilds the registered worlds whose inputs changed (engine source, the template "
                "files and brief each reads) or that were never built; refreshes the catalog at 03:30 UTC.",
)

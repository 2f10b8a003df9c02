"""Registration sensor (new worlds from the registry and data/briefs/) and the nightly rebuild."""

# No `from __future__ import annotations` here: Dagster reads the context and resource annotations.
import warnings

import dagster as dg

from assets.stage import GROUP
from pipelines.jobs import world_build
from pipelines.partitions import world_partitions
from resources.world_store import WorldStore
from worldfactory.registry import wanted_worlds
from worldfactory.templates import TemplateError


@dg.sensor(job=world_build, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds world IDs from world_templates/registry.yaml and data/briefs/ (*.yaml, *.md) as "
                       "partitions and requests a build run for each new one. Deleted worlds stay deleted.")
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
        run_requests=[dg.RunRequest(partition_key=w, run_key=f"register:{w}") for w in new],
        dynamic_partitions_requests=[world_partitions.build_add_request(new)],
    )


with warnings.catch_warnings():  # `use_user_code_server` is beta in Dagster 1.13; the custom condition needs it
    warnings.simplefilter("ignore", dg.BetaWarning)
    nightly_rebuild = dg.AutomationConditionSensorDefinition(
        "nightly_rebuild", target=dg.AssetSelection.groups(GROUP, "catalog"),
        default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=60, use_user_code_server=True,
        description="At 03:00 UTC rebuilds the registered worlds whose inputs changed (engine source, the template "
                    "files and brief each reads) or that were never built; refreshes the catalog at 03:30 UTC.",
    )

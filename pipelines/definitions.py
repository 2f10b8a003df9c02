"""The code location: every asset, check, job, sensor and resource in one Definitions.

Runs use the in-process executor: a world's stages are short and sequential, and a process per
step would cost more than the stage itself. Parallelism comes from running worlds side by side.
"""

from __future__ import annotations

import dagster as dg

from worldfactory_dagster.assets import catalog, draft, evals, image
from worldfactory_dagster.assets.stage import stage_assets
from worldfactory_dagster.assets.versions import nightly_condition
from worldfactory_dagster.pipelines.automation import eval_run_sensor, nightly_rebuild, world_registry_sensor
from worldfactory_dagster.pipelines.jobs import brief_build, catalog_refresh, eval_runs, world_build, world_images
from worldfactory_dagster.resources.policy import RolloutPolicy
from worldfactory_dagster.resources.world_store import WorldStore, default_store


def make_definitions(store: WorldStore | None = None, policy: RolloutPolicy | None = None) -> dg.Definitions:
    store = store or default_store()
    nightly = nightly_condition(store)  # asks this store's templates and bundles which worlds changed
    stages = [asset.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=nightly))
              for asset in stage_assets(upstream=[draft.pack_draft.key])]
    return dg.Definitions(
        assets=[draft.pack_draft, *stages, catalog.world_catalog, image.world_image, evals.eval_run],
        jobs=[world_build, brief_build, catalog_refresh, world_images, eval_runs],
        sensors=[world_registry_sensor, nightly_rebuild, eval_run_sensor],
        resources={"world_store": store, "rollout_policy": policy or RolloutPolicy()},
        executor=dg.in_process_executor,
    )


defs = make_definitions()

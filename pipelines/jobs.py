"""Jobs: every stage of one world (one run per world partition; a free-text brief's world with its draft
step first), the catalog refresh, world images and evaluation runs."""

from __future__ import annotations

import dagster as dg

from worldfactory_dagster.assets.draft import GROUP as DRAFT_GROUP
from worldfactory_dagster.assets.evals import GROUP as EVAL_GROUP
from worldfactory_dagster.assets.image import GROUP as IMAGE_GROUP
from worldfactory_dagster.assets.stage import GROUP

world_build = dg.define_asset_job(
    "world_build", selection=dg.AssetSelection.groups(GROUP),
    description="Every stage of one world, each stopped by a failed blocking check upstream.",
    tags={"worldfactory/queue": "world_build"},  # a queued deployment limits these runs (deploy/dagster.yaml.in)
)
# A free-text brief's world: its draft step (reused when recorded) before every stage.
brief_build = dg.define_asset_job(
    "brief_build", selection=dg.AssetSelection.groups(DRAFT_GROUP, GROUP),
    description="A free-text brief's world: pack_draft (the drafted pack, reused while the brief and model stay "
                "the same), then every stage.",
    tags={"worldfactory/queue": "world_build"},
)
catalog_refresh = dg.define_asset_job("catalog_refresh", selection=dg.AssetSelection.groups("catalog"))
# On request only (it needs a container engine): each world's image, checked by running it.
world_images = dg.define_asset_job(
    "world_images", selection=dg.AssetSelection.groups(IMAGE_GROUP),
    description="Each world's container image, after its bundle; the blocking check runs the container.",
)
# Evaluation runs (one partition per run): requested by eval_run_sensor as new runs appear in data/runs/.
eval_runs = dg.define_asset_job(
    "eval_runs", selection=dg.AssetSelection.groups(EVAL_GROUP),
    description="An evaluation run resumed where it stopped, then summarised: pass^1/pass^k, band, causes.",
)

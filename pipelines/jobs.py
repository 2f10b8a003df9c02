"""Jobs: every stage of one world (one run per world partition), and the catalog refresh."""

from __future__ import annotations

import dagster as dg

from assets.stage import GROUP

world_build = dg.define_asset_job(
    "world_build", selection=dg.AssetSelection.groups(GROUP),
    description="Every stage of one world, each stopped by a failed blocking check upstream.",
)
catalog_refresh = dg.define_asset_job("catalog_refresh", selection=dg.AssetSelection.groups("catalog"))

"""Stage asset `world_bundle` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.curated import curated_asset
from assets.stage import stage_asset

bundle_asset = stage_asset("world_bundle", [curated_asset])

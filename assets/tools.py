"""Stage asset `world_tools` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.seed import seed_asset
from assets.stage import stage_asset

tools_asset = stage_asset("world_tools", [seed_asset])

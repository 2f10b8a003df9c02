"""Stage asset `world_brief` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.stage import stage_asset

brief_asset = stage_asset("world_brief", [])

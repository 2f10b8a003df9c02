"""Stage asset `world_schema` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.brief import brief_asset
from assets.stage import stage_asset

schema_asset = stage_asset("world_schema", [brief_asset])

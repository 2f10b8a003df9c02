"""Stage asset `seed_database` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.schema import schema_asset
from assets.stage import stage_asset

seed_asset = stage_asset("seed_database", [schema_asset])

"""Stage asset `world_bundle` and its blocking check (see worldfactory.build.stages)."""

from __future__ import annotations

from assets.stage import stage_asset
from assets.verifiers import verifiers_asset

bundle_asset = stage_asset("world_bundle", [verifiers_asset])

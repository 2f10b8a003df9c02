"""Stage asset `world_verifiers` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.stage import stage_asset
from assets.tasks import tasks_asset

verifiers_asset = stage_asset("world_verifiers", [tasks_asset])

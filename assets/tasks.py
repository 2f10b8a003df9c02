"""Stage asset `world_tasks` and its blocking check (see worldfactory.stages.core)."""

from __future__ import annotations

from assets.stage import stage_asset
from assets.tools import tools_asset

tasks_asset = stage_asset("world_tasks", [tools_asset])

"""Stage asset `curated_tasks`: the pass band, tasks with a pass rate strictly between 0 and 1."""

from __future__ import annotations

from assets.rollouts import rollouts_asset
from assets.stage import stage_asset

curated_asset = stage_asset("curated_tasks", [rollouts_asset])

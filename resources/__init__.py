"""Dagster resources for the WorldFactory code location."""

from __future__ import annotations

from worldfactory_dagster.resources.policy import RolloutPolicy
from worldfactory_dagster.resources.world_store import WorldStore, default_store

__all__ = ["RolloutPolicy", "WorldStore", "default_store"]

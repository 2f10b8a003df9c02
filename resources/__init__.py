"""Dagster resources for the WorldFactory code location."""

from __future__ import annotations

from resources.world_store import WorldStore, default_store

__all__ = ["WorldStore", "default_store"]

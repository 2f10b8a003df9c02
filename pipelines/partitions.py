"""One dynamic partition per world ID, shared by every per-world asset."""

from __future__ import annotations

import dagster as dg

world_partitions = dg.DynamicPartitionsDefinition(name="world")

"""One dynamic partition per world ID, shared by every per-world asset."""

from __future__ import annotations

import dagster as dg

from worldfactory.run_size import WORLDS_PER_RUN

world_partitions = dg.DynamicPartitionsDefinition(name="world")
# The run tags that make a run cover a range of world partitions (consecutive in the partition order).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"

# A backfill (from the UI, or the nightly automation's) runs ranges of at most WORLDS_PER_RUN worlds.
world_backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=WORLDS_PER_RUN)

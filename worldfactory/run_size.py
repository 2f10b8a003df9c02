"""How many worlds one Dagster run builds: declared here, apart from the process pool, so that the
runtime can size its caches by it without importing multiprocessing."""

# Worlds per Dagster run when many are built: a run over a range of world partitions spreads
# Dagster's fixed cost per run and step over its worlds (bench/dagster_bench.py: about 0.7 CPU s a world
# in one-world runs, 0.16 in runs of 20). `worldfactory build --batch` defaults to it, backfills
# from the UI or the nightly automation split into runs of at most this many (pipelines/partitions.py),
# and a process keeps this many worlds loaded (worldfactory/runtime/world.py: LOAD_CACHE).
WORLDS_PER_RUN = 20

"""The WorldFactory Dagster code location: partitions, jobs, sensors, automation, definitions.

Every process that loads it (the CLI's builds, their worker processes, `dagster dev` and the runs it
launches) writes the local instance's SQLite files without a disk wait per write (instance_sync).
"""

from worldfactory_dagster.pipelines import instance_sync

instance_sync.install()

"""The WorldFactory Dagster code location: partitions, jobs, sensors, automation, definitions.

Every process that loads it (the CLI's builds, their worker processes, `dagster dev` and the runs it
launches) writes the local instance's SQLite files without a disk wait per write (instance_sync),
and none of them prints Dagster's API-stability warnings (quiet).
"""

from worldfactory_dagster.pipelines import quiet

quiet.install()  # before any definition below is made: the warnings fire when assets are defined

from worldfactory_dagster.pipelines import instance_sync  # noqa: E402

instance_sync.install()

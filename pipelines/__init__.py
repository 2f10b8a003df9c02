"""The WorldFactory Dagster code location: partitions, jobs, sensors, automation, definitions."""

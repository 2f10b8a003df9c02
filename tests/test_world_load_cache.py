"""A Dagster range run builds its worlds stage by stage: every world of the run is loaded once per stage,
so a process must keep a whole run's worlds loaded, or each load of the next stage starts cold."""

from __future__ import annotations

from worldfactory import confine
from worldfactory.run_size import WORLDS_PER_RUN
from worldfactory.runtime import world as world_module
from worldfactory.runtime.world import World


def _variants(world: World) -> list[dict[str, bytes]]:
    """WORLDS_PER_RUN worlds that differ in their bytes (trailing blank lines), as distinct worlds of a run do."""
    out = []
    for i in range(1, WORLDS_PER_RUN + 1):
        files = dict(world.files)
        for name in ("spec.json", "tools.py", "tools.json", "tasks.jsonl"):
            files[name] = files[name] + b"\n" * i
        out.append(files)
    return out


def test_a_run_of_worlds_stays_loaded_from_one_stage_to_the_next(worlds: dict[str, World]) -> None:
    runs = _variants(next(iter(worlds.values())))
    caches = (world_module.parsed_spec, world_module.parsed_tasks, world_module._compiled,
              world_module._fast_validators, world_module._statically_checked)
    first = [confine._job_open_world(files) for files in runs]  # one stage, over the whole run
    opened = [confine._world(key) for key in first]
    misses = [c.cache_info().misses for c in caches]
    second = [confine._job_open_world(files) for files in runs]  # the next stage, in the same order
    assert second == first
    assert all(confine._world(key) is w for key, w in zip(second, opened, strict=True)), "a world was loaded again"
    # a World made from the same files again (as a stage outside the worker does) parses and compiles nothing
    for files in runs:
        World(files)
    assert [c.cache_info().misses for c in caches] == misses

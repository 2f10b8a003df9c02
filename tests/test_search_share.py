"""The task builder keeps its share of tasks that need a search: when a world falls short, attributes name
every main record they can, instead of a share of them."""

from __future__ import annotations

from worldfactory.generate.tasks.builder import SEARCH_CHECK_AFTER, SEARCH_FLOOR, TaskBuilder
from worldfactory.runtime.world import World
from worldfactory.spec import Task, ToolCall, WorldSpec


def _filler(n: int, searching: int) -> list[Task]:
    call = [ToolCall(tool="noop", args={})]
    return [Task(task_id=f"x-{i:03d}", family="lookup_act", instruction=f"filler {i}", oracle=call, target="t",
                 needs_search=i < searching) for i in range(n)]


def _named_by_attributes(world: World, builder: TaskBuilder) -> tuple[int, int]:
    """(records attributes can name, of those: how many address() named by attributes), over the claims."""
    table = builder.spec.table("claims")
    possible = named = 0
    for row in builder.rows(table)[:60]:
        if builder._address_by_attributes(table, row) is None:
            continue
        possible += 1
        address = builder.address(table, row)
        named += address is not None and not address.text.startswith(f"{table.singular} ")
    return possible, named


def test_a_world_short_of_searches_names_every_record_it_can_by_attributes(worlds: dict[str, World]) -> None:
    world = worlds["insurance-claims.regional--v001"]
    spec = WorldSpec.model_validate_json(world.files["spec.json"])
    short = TaskBuilder(spec, set(world.functions), world.files["seed.db"])
    short.tasks = _filler(SEARCH_CHECK_AFTER, searching=int(SEARCH_FLOOR * SEARCH_CHECK_AFTER) - 1)
    assert short.searches_short()
    possible, named = _named_by_attributes(world, short)
    assert possible >= 10 and named == possible

    enough = TaskBuilder(spec, set(world.functions), world.files["seed.db"])
    enough.tasks = _filler(SEARCH_CHECK_AFTER, searching=SEARCH_CHECK_AFTER)
    assert not enough.searches_short()
    possible, named = _named_by_attributes(world, enough)
    assert 0 < named < possible  # the usual share: some by attributes, the rest by their claim number

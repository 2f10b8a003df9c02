"""world_brief: the company, its modules, rules and clock, expanded from the world ID (and its brief file)."""

from __future__ import annotations

from worldfactory.seeds import expand_world
from worldfactory.stages.core import BuildContext, Stage, StageError


def make_brief(ctx: BuildContext) -> dict[str, int]:
    brief = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    ctx.work.write("brief.json", (brief.model_dump_json(indent=1) + "\n").encode())
    return {"modules": len(brief.modules), "rules": len(brief.rules), "departments": len(brief.departments)}


def prove_brief(ctx: BuildContext) -> dict[str, int | float | str]:
    brief = ctx.brief(STAGE.name)
    expected = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    if brief != expected:
        raise StageError("brief.json does not match the brief its world ID and templates give")
    return {"rules": len(brief.rules), "modules": len(brief.modules)}


STAGE = Stage(
    name="world_brief",
    check="brief_valid",
    proves=("brief.json validates and matches its seed"),
    make=make_brief,
    prove=prove_brief,
    writes=("brief.json",),
)

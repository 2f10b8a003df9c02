"""world_schema: the resolved spec (tables, keys, CHECKs, enums, workflows) and its DDL."""

from __future__ import annotations

from worldfactory.generate.schema import build_spec, check_schema, schema_sql
from worldfactory.stages.brief import world_templates
from worldfactory.stages.core import BuildContext, Stage


def make_schema(ctx: BuildContext) -> dict[str, int]:
    spec = build_spec(ctx.brief(STAGE.name), world_templates(ctx, STAGE.name))  # the world's pack.json
    ctx.work.write("spec.json", (spec.model_dump_json(indent=1, by_alias=True) + "\n").encode())
    ctx.work.write("schema.sql", schema_sql(spec).encode())
    return {"tables": len(spec.tables), "columns": sum(len(t.columns) for t in spec.tables),
            "foreign_keys": sum(1 for t in spec.tables for c in t.columns if c.ref)}


def prove_schema(ctx: BuildContext) -> dict[str, int | float | str]:
    spec = ctx.spec(STAGE.name)
    return dict(check_schema(spec, ctx.work.read("schema.sql", STAGE.name).decode()))


STAGE = Stage(
    name="world_schema",
    check="schema_loads",
    proves=("the DDL loads into an empty SQLite, names are unique, the FK graph is connected"),
    make=make_schema,
    prove=prove_schema,
    writes=("spec.json", "schema.sql"),
    reads=("brief.json", "pack.json"),
)

"""world_tools: generated tool code and its MCP manifests, with probe calls."""

from __future__ import annotations

from worldfactory.generate.probes import probes_for
from worldfactory.generate.tools import tool_specs, tools_json, tools_source
from worldfactory.stages.core import BuildContext, Stage
from worldfactory.tool_probes import check_tools_in_sandbox


def make_tools(ctx: BuildContext) -> dict[str, int]:
    spec = ctx.spec(STAGE.name)
    image = ctx.work.read("seed.db", STAGE.name)
    tools = tool_specs(spec)
    probes = probes_for(spec, tools, image)
    for t in tools:
        t.examples = probes[t.name]
    ctx.work.write("tools.py", tools_source(spec, tools).encode())
    ctx.work.write("tools.json", tools_json(tools).encode())
    return {"tools": len(tools), "read_only": sum(t.read_only for t in tools),
            "destructive": sum(t.destructive for t in tools)}


def prove_tools(ctx: BuildContext) -> dict[str, int | float | str]:
    for name in ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json"):
        ctx.work.read(name, STAGE.name)
    report = check_tools_in_sandbox(ctx.work.path)
    return {k: v for k, v in report.items() if isinstance(v, int | float | str)}


STAGE = Stage(
    name="world_tools",
    check="tools_sandboxed",
    proves=("every tool imports and answers its valid and invalid probe calls in the sandbox"),
    make=make_tools,
    prove=prove_tools,
    writes=("tools.py", "tools.json"),
    reads=("brief.json", "spec.json", "schema.sql", "seed.db"),
)

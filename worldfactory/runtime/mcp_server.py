"""The agent-facing MCP server: the world's tools, and its policy handbook as a resource.

One contract on every surface: `tools/list` publishes each tool exactly as tools.json declares it
(every parameter's description, bounds, formats, enums and `additionalProperties: false`), not a
schema the SDK derives from a Python signature, and every call goes straight to Episode.call, so a
call over MCP runs the same validation, SAVEPOINT and error path as a call in process and answers
with the same text (`tool_text`). Reset and verify are never tools. A world with a handbook also
offers it as one read-only resource (`worldfactory://handbook`, markdown), the text its handbook tools
read, for agents and harnesses that load policies as context.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources import FunctionResource
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool

from worldfactory import GENERATOR_VERSION
from worldfactory.runtime.episode import Episode, Step
from worldfactory.runtime.world import World


def instructions(world: World) -> str:
    """What `initialize` tells the agent: whose software this is and the world's today."""
    return (f"You are operating the internal software of {world.brief.company_name}, a fictional "
            f"{world.brief.company_type} company. Today is {world.clock} (YYYY-MM-DD); dates are written "
            f"that way everywhere. Use the tools to look records up before acting on them.")


HANDBOOK_URI = "worldfactory://handbook"
HANDBOOK_TABLE = "handbook_sections"  # generate/handbook.py writes it; the runtime only reads it


def handbook_resource(world: World) -> dict[str, Any] | None:
    """The policy handbook as an MCP resource's listing (uri, name, description, mimeType), or None for a
    world without one. The same sections the handbook's search and get tools read."""
    if not world.spec.has_table(HANDBOOK_TABLE):
        return None
    return {"uri": HANDBOOK_URI, "name": "handbook", "title": f"{world.brief.company_name} policy handbook",
            "description": "The company's policy handbook: per rule, when it applies, its exceptions (some no tool "
                           "enforces) and whom to tell.", "mimeType": "text/markdown"}


def handbook_text(episode: Episode) -> str:
    """The handbook as markdown, read from the episode's own database (sections by id)."""
    rows = episode.conn.execute(f"SELECT title, topic, body FROM {HANDBOOK_TABLE} ORDER BY id").fetchall()
    parts = [f"# {episode.world.brief.company_name} policy handbook"]
    parts += [f"## {title}\n\nTopic: {topic}\n\n{body}" for title, topic, body in rows]
    return "\n\n".join(parts) + "\n"


def tool_text(step: Step) -> str:
    """A call's text on every surface: the result as the trace keeps it (canonical JSON), or the error as is."""
    return step.result_json if step.ok else (step.error or "the tool failed")


def call_result(step: Step) -> CallToolResult:
    """A step as an MCP tool result: the same text in process, over stdio and over HTTP."""
    text = [TextContent(type="text", text=tool_text(step))]
    if not step.ok:
        return CallToolResult(content=text, is_error=True)
    structured = step.result if isinstance(step.result, dict) else {"result": step.result}
    return CallToolResult(content=text, structured_content=structured)


def mcp_tools(world: World, entries: list[dict[str, Any]] | None = None) -> list[MCPTool]:
    """The world's tools as tools.json declares them (its input_schema verbatim); `entries`: an episode's
    own list (Episode.tool_entries: the world's, plus ask_requester where its task has a requester)."""
    out = []
    for entry in world.tool_manifest if entries is None else entries:
        ann = entry["annotations"]
        out.append(MCPTool(
            name=entry["name"], description=entry["description"], input_schema=entry["input_schema"],
            annotations=ToolAnnotations(read_only_hint=ann["read_only_hint"], destructive_hint=ann["destructive_hint"],
                                        idempotent_hint=ann["idempotent_hint"]),
            _meta={"provenance": entry["provenance"]},
        ))
    return out


class WorldServer(MCPServer):
    """MCPServer whose tools are the world's: listed from tools.json, called through one Episode.

    The SDK's own tool registry (a pydantic model per signature) is not used: it drops the
    parameter descriptions and bounds, ignores unknown keys and words errors its own way.
    """

    def __init__(self, world: World, episode: Episode, keep: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._world = world
        self._episode = episode
        self._keep = keep
        self._entries = {e["name"]: e for e in episode.tool_entries()}
        self._tools = mcp_tools(world, list(self._entries.values()))
        listing = handbook_resource(world)
        if listing is not None:
            self.add_resource(FunctionResource.from_function(
                lambda: handbook_text(self._episode), uri=listing["uri"], name=listing["name"],
                title=listing["title"], description=listing["description"], mime_type=listing["mimeType"]))

    async def list_tools(self) -> list[MCPTool]:
        return list(self._tools)

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        entry = self._entries.get(name)
        return None if entry is None else entry["input_schema"]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> CallToolResult:
        step = self._episode.call(name, arguments)  # inline on the loop: a call is ~0.1 ms, no thread hop
        if not self._keep:
            self._episode.trace.clear()
        return call_result(step)


def build_server(world: World, episode: Episode | None = None, keep: bool | None = None) -> MCPServer:
    """An MCPServer over one episode (a fresh seed copy unless one is given); it lists the episode's tools."""
    # a served episode may take any number of calls: its steps are answered, not kept
    keep = episode is not None if keep is None else keep
    return WorldServer(
        world, episode or world.episode(), keep,
        name=f"worldfactory-{world.world_id}",
        title=f"{world.brief.company_name} ({world.world_id})",
        instructions=instructions(world),
        version=GENERATOR_VERSION,
        log_level="WARNING",
    )

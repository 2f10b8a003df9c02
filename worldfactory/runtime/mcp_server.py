"""The agent-facing MCP server: the world's tools and nothing else.

Each tool is registered on an MCPServer with the generated function's own signature (so the
published schema matches the code) and routed through Episode.call, so a call over MCP runs the
same validation, SAVEPOINT and error path as a call in process. Reset and verify are never tools.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from worldfactory import GENERATOR_VERSION
from worldfactory.runtime.episode import Episode
from worldfactory.runtime.world import World


def _route(episode: Episode, name: str, fn: Callable[..., Any], keep: bool = True) -> Callable[..., Any]:
    sig = inspect.signature(fn, eval_str=True)
    params = list(sig.parameters.values())[1:]  # drop the ToolDB handle

    async def call(**kwargs: Any) -> dict[str, Any]:  # inline on the loop: a call is ~0.1 ms, no thread hop
        args = {k: v for k, v in kwargs.items() if v is not None}
        result = episode.call(name, args)
        if not keep:
            episode.trace.clear()
        if not result.ok:
            raise ToolError(result.error or "tool failed")
        return result.result or {}

    call.__name__ = name
    call.__doc__ = fn.__doc__
    call.__signature__ = sig.replace(parameters=params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    return call


class WorldServer(MCPServer):
    """MCPServer that checks raw arguments against the world's JSON schema first.

    The SDK's own argument model ignores unknown keys; an agent that misspells an argument must
    hear about it instead, with the same message an in-process call gives.
    """

    def __init__(self, world: World, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._world = world

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name in self._world.tools_by_name:
            error = self._world.argument_error(name, arguments)
            if error is not None:
                raise ToolError(error)
        return await super().call_tool(name, arguments, context)


def build_server(world: World, episode: Episode | None = None) -> MCPServer:
    """An MCPServer over one episode (a fresh seed copy unless one is given)."""
    ep = episode or world.episode()
    keep = episode is not None  # a served episode may take any number of calls: its steps are answered, not kept
    server = WorldServer(
        world,
        name=f"worldfactory-{world.world_id}",
        title=f"{world.brief.company_name} ({world.world_id})",
        instructions=(f"You are operating the internal software of {world.brief.company_name}, a fictional "
                      f"{world.brief.company_type} company. Today is {world.clock}. Use the tools to look records "
                      f"up before acting on them."),
        version=GENERATOR_VERSION,
        log_level="WARNING",
    )
    for entry in world.tool_manifest:
        name = entry["name"]
        ann = entry["annotations"]
        server.add_tool(
            _route(ep, name, world.functions[name], keep),
            name=name,
            description=entry["description"],
            annotations=ToolAnnotations(read_only_hint=ann["read_only_hint"], destructive_hint=ann["destructive_hint"],
                                        idempotent_hint=ann["idempotent_hint"]),
            meta={"provenance": entry["provenance"]},
        )
    return server


def serve(world: World, transport: str = "stdio", port: int = 8000, fd: int | None = None,
          token: str | None = None, options: Any = None) -> None:
    """Serve the world over stdio (one episode) or streamable HTTP (loopback by default).

    Over HTTP every MCP session is its own episode and a token-protected control plane runs on
    the same server (worldfactory.runtime.control); `options` is its ServeOptions (bounds, hosts).
    """
    if transport == "stdio":
        build_server(world).run("stdio")
        return
    if transport != "http":
        raise ValueError(f"unknown transport '{transport}'; use stdio or http")
    from worldfactory.runtime.control import control_token, serve_http

    serve_http(world, token or control_token(), port, fd=fd, options=options)

"""MCP over streamable HTTP, one episode per MCP session, answered as plain JSON.

The SDK's session manager runs one server lifespan for the whole app, so every HTTP session
shares whatever the tools close over; and its per-request path (streams, SSE, task groups) costs
milliseconds. This endpoint speaks the same protocol (the 2025-11-25 handshake: `initialize`
returns an `Mcp-Session-Id`; `tools/list`, `tools/call`, `ping`; DELETE ends the session; no
server-to-client stream, so GET is 405) with `application/json` responses, which the SDK's
client and every streamable-HTTP client accept. The tool list and the call texts are mcp_server's
(tools.json's schemas; `tool_text`), so they are exactly what stdio serves.

Each `initialize` on a free-form endpoint (`/mcp`) opens a new episode; on an episode's endpoint
(`/episodes/<id>/mcp`) the MCP session is bound to that episode. Reset and verify are not
tools and not methods here: the agent's protocol has no way to reach them. The two kinds never
meet: `/mcp` addresses free-form sessions only, so a control-plane episode's id (which is in
its agent's `mcp_url`) names nothing there; and DELETE at an `mcp_url` ends that MCP session,
never the episode, which stays the harness's to verify and delete. An episode holds at most
MAX_BOUND_SESSIONS MCP sessions (a new one ends the oldest), so an agent cannot grow the server
by initializing again and again.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from worldfactory import GENERATOR_VERSION
from worldfactory.runtime.mcp_server import (
    HANDBOOK_URI,
    handbook_resource,
    handbook_text,
    instructions,
    mcp_tools,
    tool_text,
)
from worldfactory.runtime.sessions import Full, Served, SessionStore
from worldfactory.runtime.world import World

LATEST = "2025-11-25"
SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SESSION_HEADER = "mcp-session-id"
MAX_BODY = 4 << 20  # a JSON-RPC request larger than this is refused (413)
MAX_BOUND_SESSIONS = 8  # MCP sessions one control-plane episode holds at once; a new one ends the oldest

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


def tool_list(world: World) -> list[dict[str, Any]]:
    """The tools as stdio lists them, from tools.json (wire format: camelCase, no nulls)."""
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in mcp_tools(world)]


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), default=str), status_code=status,
                    media_type="application/json", headers=headers)


def _error(id_: Any, code: int, message: str, status: int = 200) -> Response:
    return _json({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}, status)


class McpEndpoint:
    """The JSON-RPC side of streamable HTTP, over a SessionStore."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        world = store.world
        self._tools_result = {"tools": tool_list(world)}
        self._server_info = {"name": f"worldfactory-{world.world_id}",
                             "title": f"{world.brief.company_name} ({world.world_id})", "version": GENERATOR_VERSION}
        self._instructions = instructions(world)
        self._capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
        self._handbook = handbook_resource(world)  # the one resource's listing, or None without a handbook
        if self._handbook is not None:
            self._capabilities["resources"] = {"listChanged": False, "subscribe": False}
        self._bound: dict[str, str] = {}  # MCP session id -> episode id, for /episodes/<id>/mcp

    def _tools_of(self, served: Served) -> dict[str, Any]:
        """The episode's tool list: the world's, plus ask_requester where its task has a requester."""
        if served.episode.requester is None:
            return self._tools_result
        entries = served.episode.tool_entries()
        return {"tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                          for t in mcp_tools(self.store.world, entries)]}

    # --- sessions ---------------------------------------------------------------------------------

    def _served(self, mcp_session: str | None, episode_id: str | None) -> Served | None:
        if not mcp_session:
            return None
        if episode_id is None:  # /mcp: the MCP session id is the id of a free-form episode, never another kind
            return self.store.get(mcp_session, free=True)
        if self._bound.get(mcp_session) != episode_id:
            return None
        served = self.store.get(episode_id, free=False)
        if served is None:
            self._bound.pop(mcp_session, None)
        return served

    def _bind(self, served: Served) -> str:
        """A new MCP session on a control-plane episode; past MAX_BOUND_SESSIONS the oldest ends."""
        while len(served.mcp_sessions) >= MAX_BOUND_SESSIONS:
            oldest = next(iter(served.mcp_sessions))
            del served.mcp_sessions[oldest]
            self._bound.pop(oldest, None)
        sid = secrets.token_hex(16)
        self._bound[sid] = served.id
        served.mcp_sessions[sid] = None
        return sid

    def forget(self, served: Served) -> None:
        """An episode ended: its bound MCP sessions end with it."""
        for sid in served.mcp_sessions:
            self._bound.pop(sid, None)
        served.mcp_sessions.clear()

    # --- HTTP -------------------------------------------------------------------------------------

    async def handle(self, request: Request, episode_id: str | None = None) -> Response:
        if request.method == "POST":
            return await self._post(request, episode_id)
        if request.method == "DELETE":
            sid = request.headers.get(SESSION_HEADER)
            served = self._served(sid, episode_id)
            if served is None or sid is None:
                return _error(None, INVALID_REQUEST, "unknown or expired MCP session", 404)
            if episode_id is None:
                self.store.close(served.id)  # a free-form session's episode ends with it
            else:  # a bound session ends; the episode is the control plane's to delete
                self._bound.pop(sid, None)
                served.mcp_sessions.pop(sid, None)
            return Response(status_code=204)
        return Response("this server sends no server-initiated stream; POST JSON-RPC requests", status_code=405,
                        headers={"Allow": "POST, DELETE"})

    async def _post(self, request: Request, episode_id: str | None) -> Response:
        body = await request.body()  # bounded while it streams (http_guards.Guard); this is a second check
        if len(body) > MAX_BODY:
            return _error(None, INVALID_REQUEST, f"request body over {MAX_BODY} bytes", 413)
        try:
            msg = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return _error(None, PARSE_ERROR, "parse error: the body is not JSON", 400)
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "invalid request: one JSON-RPC 2.0 object per POST", 400)
        method = msg.get("method")
        if "id" not in msg or method is None:  # a notification or a response from the client
            if method is not None and not isinstance(method, str):
                return _error(None, INVALID_REQUEST, "invalid request: method must be a string", 400)
            return Response(status_code=202)
        id_ = msg["id"]
        if not isinstance(method, str) or not isinstance(id_, str | int) or isinstance(id_, bool):
            return _error(id_ if isinstance(id_, str | int) else None, INVALID_REQUEST,
                          "invalid request: method must be a string and id a string or integer", 400)
        params = msg.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return _error(id_, INVALID_PARAMS, "params must be an object")
        if method == "initialize":
            return self._initialize(id_, params, episode_id)
        if method == "server/discover":  # the 2026 era has no sessions: the client falls back to initialize
            return _error(id_, METHOD_NOT_FOUND, "server/discover is not supported; use initialize")
        served = self._served(request.headers.get(SESSION_HEADER), episode_id)
        if served is None:
            if request.headers.get(SESSION_HEADER):
                return _error(id_, INVALID_REQUEST, "unknown or expired MCP session; initialize again", 404)
            return _error(id_, INVALID_REQUEST, "missing Mcp-Session-Id header; initialize first", 400)
        if method == "tools/call":
            return self._call(id_, served, params)
        if method == "tools/list":
            return _json({"jsonrpc": "2.0", "id": id_, "result": self._tools_of(served)})
        if method == "ping":
            return _json({"jsonrpc": "2.0", "id": id_, "result": {}})
        if method in ("resources/list", "resources/read"):
            return self._resources(id_, served, method, params)
        return _error(id_, METHOD_NOT_FOUND, f"method not found: {str(method)[:60]}")

    def _initialize(self, id_: Any, params: dict[str, Any], episode_id: str | None) -> Response:
        asked = params.get("protocolVersion")
        version = asked if asked in SUPPORTED_VERSIONS else LATEST
        if episode_id is None:
            try:
                served = self.store.open()
            except Full as exc:
                body = {"jsonrpc": "2.0", "id": id_, "error": {"code": INVALID_REQUEST, "message": str(exc)}}
                return _json(body, 503, {"Retry-After": str(exc.retry_after)})
            sid = served.id
        else:
            served = self.store.get(episode_id, free=False)
            if served is None:
                return _error(id_, INVALID_REQUEST, "no such episode (it was deleted or it expired)", 404)
            sid = self._bind(served)
        result = {"protocolVersion": version, "capabilities": self._capabilities,
                  "serverInfo": self._server_info, "instructions": self._instructions}
        return _json({"jsonrpc": "2.0", "id": id_, "result": result}, headers={"Mcp-Session-Id": sid})

    def _resources(self, id_: Any, served: Served, method: str, params: dict[str, Any]) -> Response:
        """The handbook, the one resource (mcp_server.handbook_resource), read from the session's episode."""
        listing = self._handbook
        if method == "resources/list":
            return _json({"jsonrpc": "2.0", "id": id_, "result": {"resources": [listing] if listing else []}})
        if listing is None or params.get("uri") != HANDBOOK_URI:
            return _error(id_, INVALID_PARAMS, f"no such resource: {str(params.get('uri'))[:80]}")
        text = handbook_text(served.episode)
        return _json({"jsonrpc": "2.0", "id": id_, "result": {"contents": [
            {"uri": HANDBOOK_URI, "mimeType": listing["mimeType"], "text": text}]}})

    def _call(self, id_: Any, served: Served, params: dict[str, Any]) -> Response:
        name = params.get("name")
        args = params.get("arguments")
        if not isinstance(name, str):
            return _error(id_, INVALID_PARAMS, "tools/call needs a tool name")
        if args is None:
            args = {}
        # The call runs inline on the event loop (a tenth of a millisecond): a client that hangs up
        # mid-call cannot interrupt it, so its episode holds either the whole call or none of it.
        step = self.store.call(served, name, args)
        if step.ok:
            text = tool_text(step)
            structured = step.result if isinstance(step.result, dict) else {"result": step.result}
            result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "structuredContent": structured,
                                      "isError": False}
        else:
            result = {"content": [{"type": "text", "text": tool_text(step)}],
                      "isError": True}
        return _json({"jsonrpc": "2.0", "id": id_, "result": result})

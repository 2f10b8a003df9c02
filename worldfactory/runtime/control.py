"""The served world: MCP for agents and a token-protected control plane for harnesses, one process.

Routes (one Starlette app, served by uvicorn):

    POST|DELETE /mcp                         MCP; each MCP session is its own free-form episode
    POST|DELETE /episodes/<id>/mcp           MCP bound to one control-plane episode (tools only)
    POST   /control/episodes                 {"task_id": ...} or {} -> 201 {episode_id, instruction, mcp_url}
    POST   /control/episodes/<id>/verify     {"answer": ...} -> {passed, reward, mismatches}
    POST   /control/episodes/<id>/reset      back to the seed, same task and id
    GET    /control/episodes/<id>/trace      JSON lines, replayable by `worldfactory replay`
    DELETE /control/episodes/<id>            204
    GET    /control/tasks                    [{task_id, family, curated}] (curated: in the pass band)
    GET    /healthz                          {"ok": true, "episodes": n} (no token, no state)

Every /control request needs `Authorization: Bearer <token>`; without it, or with another
token, the answer is 401 and nothing changes. The MCP routes never reach the control plane:
an agent holding an mcp_url can list and call the world's tools, nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worldfactory.runtime.mcp_http import McpEndpoint
from worldfactory.runtime.sessions import DEFAULT_IDLE_SECONDS, SessionStore
from worldfactory.runtime.world import World, WorldError

ENV_TOKEN = "WORLDFACTORY_CONTROL_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def control_token(announce: Callable[[str], None] | None = None) -> str:
    """$WORLDFACTORY_CONTROL_TOKEN, or a new random token announced on stderr."""
    token = os.environ.get(ENV_TOKEN, "").strip()
    if token:
        return token
    token = secrets.token_urlsafe(32)
    (announce or (lambda t: print(f"control plane token (set {ENV_TOKEN} to choose one): {t}",
                                  file=sys.stderr, flush=True)))(token)
    return token


def _err(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _json_body(request: Request) -> dict[str, Any] | JSONResponse:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _err(400, "the body is not JSON")
    if not isinstance(body, dict):
        return _err(400, "the body must be a JSON object")
    return body


def _curated(world: World) -> list[str]:
    raw = world.files.get("curated_tasks.jsonl", b"")
    return [json.loads(line)["task_id"] for line in raw.decode().splitlines() if line.strip()]


def _episode_view(served: Any) -> dict[str, Any]:
    return {"episode_id": served.id, "instruction": served.instruction, "mcp_url": f"/episodes/{served.id}/mcp",
            "task_id": served.task_id}


def create_app(world: World, token: str, idle_seconds: float = DEFAULT_IDLE_SECONDS,
               clock: Callable[[], float] | None = None, host: str = "127.0.0.1",
               max_sessions: int | None = None) -> Starlette:
    """The served world's app. `clock` (monotonic seconds) is injectable for expiry tests."""
    if not token:
        raise ValueError("the control plane needs a non-empty token")
    store = SessionStore(world, idle_seconds, **({"clock": clock} if clock else {}), max_sessions=max_sessions)
    mcp = McpEndpoint(store)
    expected = f"Bearer {token}".encode()
    check_host = host in LOOPBACK  # DNS rebinding: a loopback server answers loopback Host headers only

    def host_ok(request: Request) -> bool:
        if not check_host:
            return True
        value = request.headers.get("host", "")
        name = value.split("]")[0] + "]" if value.startswith("[") else value.rsplit(":", 1)[0]
        return name in LOOPBACK

    def authorized(request: Request) -> bool:
        return hmac.compare_digest(request.headers.get("authorization", "").encode(), expected)

    def denied() -> JSONResponse:
        return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401,
                            headers={"WWW-Authenticate": 'Bearer realm="worldfactory-control"'})

    def guarded(handler: Callable[..., Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            if not host_ok(request):
                return _err(421, "invalid Host header")
            if not authorized(request):
                return denied()
            store.maybe_sweep()
            return await handler(request)

        return endpoint

    async def mcp_free(request: Request) -> Response:
        if not host_ok(request):
            return _err(421, "invalid Host header")
        store.maybe_sweep()
        return await mcp.handle(request)

    async def mcp_bound(request: Request) -> Response:
        if not host_ok(request):
            return _err(421, "invalid Host header")
        store.maybe_sweep()
        return await mcp.handle(request, request.path_params["episode_id"])

    async def create(request: Request) -> Response:
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        task_id = body.get("task_id")
        if task_id is not None and not isinstance(task_id, str):
            return _err(400, "task_id must be a string")
        try:
            served = store.open(task_id or None, keep_trace=True)
        except WorldError as exc:
            return _err(404, str(exc))
        except OverflowError as exc:
            return _err(503, str(exc))
        return JSONResponse(_episode_view(served), status_code=201)

    def lookup(request: Request) -> Any:
        return store.get(request.path_params["episode_id"])

    async def verify(request: Request) -> Response:
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        served = lookup(request)
        if served is None:
            return _err(404, "no such episode (it was deleted or it expired)")
        if served.task_id is None:
            return _err(409, "a free-form episode has no task to verify; create one with a task_id")
        answer = body.get("answer")
        try:
            verdict = served.episode.verify(answer)
        except (ValueError, PermissionError) as exc:
            return _err(409, str(exc))
        served.answer = answer
        return JSONResponse({"passed": verdict.passed, "reward": verdict.reward,
                             "mismatches": [m.model_dump(mode="json") for m in verdict.mismatches]})

    async def reset(request: Request) -> Response:
        served = store.reset(request.path_params["episode_id"])
        if served is None:
            return _err(404, "no such episode (it was deleted or it expired)")
        return JSONResponse(_episode_view(served))

    async def trace(request: Request) -> Response:
        served = lookup(request)
        if served is None:
            return _err(404, "no such episode (it was deleted or it expired)")
        return Response(store.trace_jsonl(served), media_type="application/x-ndjson")

    async def delete(request: Request) -> Response:
        served = store.get(request.path_params["episode_id"])
        if served is None:
            return _err(404, "no such episode (it was deleted or it expired)")
        mcp.forget(served)
        store.close(served.id)
        return Response(status_code=204)

    curated = set(_curated(world))

    async def tasks(request: Request) -> Response:
        return JSONResponse([{"task_id": t.task_id, "family": t.family, "curated": t.task_id in curated}
                             for t in world.tasks.values()])

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "world_id": world.world_id, "episodes": len(store)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(min(60.0, max(0.05, store.idle_seconds / 100)))
                store.sweep()

        task = asyncio.create_task(sweeper())
        try:
            yield
        finally:
            task.cancel()
            store.close_all()

    routes = [
        Route("/mcp", mcp_free, methods=["GET", "POST", "DELETE"]),
        Route("/episodes/{episode_id}/mcp", mcp_bound, methods=["GET", "POST", "DELETE"]),
        Route("/control/episodes", guarded(create), methods=["POST"]),
        Route("/control/episodes/{episode_id}/verify", guarded(verify), methods=["POST"]),
        Route("/control/episodes/{episode_id}/reset", guarded(reset), methods=["POST"]),
        Route("/control/episodes/{episode_id}/trace", guarded(trace), methods=["GET"]),
        Route("/control/episodes/{episode_id}", guarded(delete), methods=["DELETE"]),
        Route("/control/tasks", guarded(tasks), methods=["GET"]),
        Route("/healthz", health, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.store = store
    app.state.mcp = mcp
    return app


def serve_http(world: World, token: str, host: str = "127.0.0.1", port: int = 8000, fd: int | None = None,
               idle_seconds: float = DEFAULT_IDLE_SECONDS) -> None:
    """Run the app with uvicorn: on an inherited listening socket (confined), or bound here."""
    import uvicorn

    app = create_app(world, token, idle_seconds, host=host)
    opts: dict[str, Any] = {"log_level": "warning", "access_log": False, "timeout_keep_alive": 75}
    if fd is not None:
        uvicorn.run(app, fd=fd, **opts)
    else:
        uvicorn.run(app, host=host, port=port, **opts)

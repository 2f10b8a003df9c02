"""The served world: MCP for agents and a token-protected control plane for harnesses, one process.

Routes (one Starlette app, served by uvicorn):

    POST|DELETE /mcp                         MCP; each MCP session is its own free-form episode
    POST|DELETE /episodes/<id>/mcp           MCP bound to one control-plane episode (tools only)
    POST   /control/episodes                 {"task_id": ...} or {} -> 201 {episode_id, instruction, mcp_url}
    POST   /control/episodes/<id>/verify     {"answer": ...} -> {passed, reward, mismatches}
    POST   /control/episodes/<id>/messages   {"message": ...} -> {"reply"}: the trainer's channel to the requester
    POST   /control/episodes/<id>/reset      back to the seed, same task and id
    GET    /control/episodes/<id>/trace      JSON lines, replayable by `worldfactory replay`
    DELETE /control/episodes/<id>            204
    GET    /control/tasks                    [{task_id, family, curated}] (curated: in the pass band)
    GET    /healthz                          {"ok": true, "episodes": n} (no token, no state)

Every /control request needs `Authorization: Bearer <token>`; without it, or with another
token, the answer is 401 and nothing changes. `/mcp` needs the token too when the server is
bound off loopback (`mcp_auth="token"`, the default there); on loopback it is open unless asked.
The MCP routes never reach the control plane: an agent holding an mcp_url can list and call the
world's tools, nothing else, and `/mcp` never addresses a control-plane episode.

Every request passes http_guards.Guard first (Host, Origin, body size and time). Capacity is
the SessionStore's (sessions.py): when it is full, a new episode or free-form session gets 503
with `Retry-After`, while /healthz, the control plane's other routes and the sessions already
open keep answering.
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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from worldfactory.runtime.http_guards import BODY_SECONDS, Guard, HostPolicy, guarded_protocol, is_loopback
from worldfactory.runtime.mcp_http import MAX_BODY, McpEndpoint
from worldfactory.runtime.mcp_server import build_server
from worldfactory.runtime.sessions import DEFAULT_FREE_IDLE_SECONDS, DEFAULT_IDLE_SECONDS, Full, SessionStore
from worldfactory.runtime.world import World, WorldError

ENV_TOKEN = "WORLDFACTORY_CONTROL_TOKEN"
ENV_ALLOWED_HOSTS = "WORLDFACTORY_ALLOWED_HOSTS"  # comma-separated; the container image sets it
DEFAULT_MAX_CONNECTIONS = 2048  # open connections at once; past it uvicorn answers 503 (the fd limit is 8,192)
KEEP_ALIVE_SECONDS = 5  # an idle keep-alive connection closes after this long


class ServeOptions(BaseModel):
    """How a served world bounds itself and whom it answers: the `serve --transport http` flags."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    idle_seconds: float = Field(DEFAULT_IDLE_SECONDS, gt=0)  # control-plane episodes
    free_idle_seconds: float = Field(DEFAULT_FREE_IDLE_SECONDS, gt=0)  # free-form /mcp sessions
    max_sessions: int | None = Field(None, ge=1)  # None: what fits half the memory limit (sessions.py)
    max_free_sessions: int | None = Field(None, ge=0)  # None: half of max_sessions
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, ge=1)
    max_body: int = Field(MAX_BODY, ge=1024)
    body_seconds: float = Field(BODY_SECONDS, gt=0)  # a request body must arrive within this long
    allowed_hosts: tuple[str, ...] = ()  # loopback names are always allowed
    allowed_origins: tuple[str, ...] = ()  # requests with no Origin (every non-browser client) always are
    mcp_auth: Literal["token", "open"] | None = None  # None: "open" on loopback, "token" off it
    openenv: bool = False  # OpenEnv's app beside MCP: /ws, /reset, /step, /state, /metadata, /health (trainers extra)

    @model_validator(mode="after")
    def _names_off_loopback(self) -> ServeOptions:
        if not is_loopback(self.host) and not self.allowed_hosts:
            raise ValueError(
                f"serving on {self.host} (off loopback) needs the host names clients reach this server by: "
                f"--allowed-host NAME (repeatable) or {ENV_ALLOWED_HOSTS}=name1,name2; '*' accepts any Host "
                f"(no protection against DNS rebinding)")
        return self

    @property
    def mcp_needs_token(self) -> bool:
        return (self.mcp_auth or ("open" if is_loopback(self.host) else "token")) == "token"


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
    from worldfactory.requester import topics

    return {"episode_id": served.id, "instruction": served.instruction, "mcp_url": f"/episodes/{served.id}/mcp",
            "task_id": served.task_id, "requester_topics": topics(served.episode.task)}


def _full(exc: Full) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": str(exc.retry_after)})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code,
                        headers={"connection": "close"} if exc.status_code in (408, 413) else None)


# Apps served beside MCP at "/" when ServeOptions names them (openenv): the layer that owns one registers
# its factory, (world, max_sessions=...) -> an ASGI app, so the runtime serves it and never imports an app.
MOUNTS: dict[str, Callable[..., Any]] = {}


def register_mount(name: str, factory: Callable[..., Any]) -> None:
    """Hand the server an app to mount when its option is on (the CLI hands it OpenEnv's)."""
    MOUNTS[name] = factory


def create_app(world: World, token: str, options: ServeOptions | None = None,
               clock: Callable[[], float] | None = None, memory_limit_bytes: int | None = None,
               **overrides: Any) -> Starlette:
    """The served world's app (Starlette behind http_guards.Guard); `overrides` are ServeOptions fields.

    `clock` (monotonic seconds) is injectable for expiry tests, `memory_limit_bytes` for admission tests.
    """
    if not token:
        raise ValueError("the control plane needs a non-empty token")
    opts = ServeOptions(**{**(options.model_dump() if options else {}), **overrides})
    store = SessionStore(world, opts.idle_seconds, **({"clock": clock} if clock else {}),
                         max_sessions=opts.max_sessions, free_idle_seconds=opts.free_idle_seconds,
                         max_free=opts.max_free_sessions, memory_limit_bytes=memory_limit_bytes)
    mcp = McpEndpoint(store)
    expected = f"Bearer {token}".encode()

    def authorized(request: Request) -> bool:
        return hmac.compare_digest(request.headers.get("authorization", "").encode(), expected)

    def denied() -> JSONResponse:
        return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401,
                            headers={"WWW-Authenticate": 'Bearer realm="worldfactory-control"'})

    def guarded(handler: Callable[..., Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            if not authorized(request):
                return denied()
            store.maybe_sweep()
            return await handler(request)

        return endpoint

    async def mcp_free(request: Request) -> Response:
        if opts.mcp_needs_token and not authorized(request):
            return denied()
        store.maybe_sweep()
        return await mcp.handle(request)

    async def mcp_bound(request: Request) -> Response:  # the mcp_url is the agent's capability: no token
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
        except Full as exc:
            return _full(exc)
        return JSONResponse(_episode_view(served), status_code=201)

    def lookup(request: Request) -> Any:  # the control plane's own episodes only
        return store.get(request.path_params["episode_id"], free=False)

    async def posted(request: Request) -> tuple[dict[str, Any], Any] | Response:
        """A POST to one episode: its JSON body and the episode, or the error response that answers it."""
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        served = lookup(request)
        if served is None:
            return _err(404, "no such episode (it was deleted or it expired)")
        return body, served

    async def verify(request: Request) -> Response:
        got = await posted(request)
        if isinstance(got, Response):
            return got
        body, served = got
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

    async def message(request: Request) -> Response:
        """The trainer's channel: the agent's words to the requester, answered from the task's hidden facts
        (requester.py) and kept in the trace as an ask call, as the agent's own ask_requester call is."""
        got = await posted(request)
        if isinstance(got, Response):
            return got
        body, served = got
        if served.episode.requester is None:
            return _err(409, "this episode's task has no requester to message")
        text = body.get("message")
        if not isinstance(text, str) or not text.strip():
            return _err(400, "message must be a non-empty string")
        step = store.call(served, "ask_requester", {"message": text})
        if not step.ok:
            return _err(400, step.error or "the message was refused")
        return JSONResponse({"reply": (step.result or {}).get("answer", "")})

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
        served = lookup(request)
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
        return JSONResponse({"ok": True, "world_id": world.world_id, "episodes": len(store),
                             "free_sessions": store.free_count, "max_sessions": store.max_sessions,
                             "max_free_sessions": store.max_free})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(store.sweep_every)
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
        Route("/control/episodes/{episode_id}/messages", guarded(message), methods=["POST"]),
        Route("/control/episodes/{episode_id}/reset", guarded(reset), methods=["POST"]),
        Route("/control/episodes/{episode_id}/trace", guarded(trace), methods=["GET"]),
        Route("/control/episodes/{episode_id}", guarded(delete), methods=["DELETE"]),
        Route("/control/tasks", guarded(tasks), methods=["GET"]),
        Route("/healthz", health, methods=["GET"]),
    ]
    if opts.openenv:  # OpenEnv's own app answers every path not above (its sessions bounded as ours are)
        if "openenv" not in MOUNTS:
            raise ValueError("serve --openenv: no OpenEnv app registered (the CLI registers "
                             "worldfactory.adapters.openenv_server's with register_mount)")
        routes.append(Mount("/", app=MOUNTS["openenv"](world, max_sessions=store.max_sessions)))
    guard = Middleware(Guard, policy=HostPolicy(opts.allowed_hosts, opts.allowed_origins), max_body=opts.max_body,
                       body_seconds=opts.body_seconds)
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[guard],
                    exception_handlers={HTTPException: _http_error})
    app.state.store = store
    app.state.mcp = mcp
    app.state.options = opts
    return app


def uvicorn_options(options: ServeOptions) -> dict[str, Any]:
    """uvicorn's per-connection limits: a head deadline and size (guarded_protocol), keep-alive, a connection cap."""
    return {"log_level": "warning", "access_log": False, "http": guarded_protocol(),
            "timeout_keep_alive": KEEP_ALIVE_SECONDS, "limit_concurrency": options.max_connections, "backlog": 2048}


def serve_http(world: World, token: str, port: int = 8000, fd: int | None = None,
               options: ServeOptions | None = None) -> None:
    """Run the app with uvicorn: on an inherited listening socket (confined), or bound here."""
    import uvicorn

    options = options or ServeOptions()
    app = create_app(world, token, options)
    if fd is not None:
        uvicorn.run(app, fd=fd, **uvicorn_options(options))
    else:
        uvicorn.run(app, host=options.host, port=port, **uvicorn_options(options))


def serve(world: World, transport: str = "stdio", port: int = 8000, fd: int | None = None,
          token: str | None = None, options: ServeOptions | None = None, task_id: str | None = None) -> None:
    """Serve the world over stdio (one episode) or streamable HTTP (loopback by default).

    Over HTTP every MCP session is its own episode and a token-protected control plane runs on
    the same server; `options` is its ServeOptions (bounds, hosts). (It lives here, above mcp_server.py's
    stdio server, so that the runtime's modules import one way.)
    """
    if transport == "stdio":
        build_server(world, world.episode(task_id) if task_id else None, keep=False).run("stdio")
        return
    if transport != "http":
        raise ValueError(f"unknown transport '{transport}'; use stdio or http")
    serve_http(world, token or control_token(), port, fd=fd, options=options)

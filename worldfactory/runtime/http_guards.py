"""What the served world checks before any handler runs: Host, Origin, body size and time, slow headers.

- **Host** (DNS rebinding): a request whose `Host` names a host this server was not told it is
  reached by gets 421. Loopback names are always accepted (a rebinding page never sends them);
  a server bound off loopback must be given its names (`--allowed-host`), or `*` for any.
- **Origin** (the MCP transport spec: "servers MUST validate the Origin header"): a request that
  carries an `Origin` not in the allowed list gets 403. Harnesses and MCP clients send none; a
  web page always does, so a page on another site cannot drive the server through a browser.
- **WebSockets** (OpenEnv's `/ws`, `serve --openenv`): the same Host and Origin checks before the
  handshake is accepted; a refused one is closed with 1008 (uvicorn answers the upgrade with 403),
  so a page on another site cannot open a session through a browser either.
- **Bodies**: refused with 413 by `Content-Length` before a byte is read, and while streaming
  as soon as they pass the limit (chunked bodies have no length); a body that takes longer than
  `body_seconds` to arrive gets 408. Nothing is read whole before the check.
- **Slow, huge or absent heads**: uvicorn's keep-alive timer starts only after a first response,
  so a connection that never sends a request would be held forever (8,400 such connections used
  up the file descriptors). `guarded_protocol()` closes a connection whose request head has not
  arrived within `header_seconds` of connecting or of its previous response, or passes
  `max_head_bytes`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
ANY = "*"
HEADER_SECONDS = 10.0  # a connection must send a whole request head within this long
MAX_HEAD_BYTES = 16 << 10  # and no more than this many bytes of it
BODY_SECONDS = 30.0  # and a whole body within this long of the first body byte asked for


def is_loopback(host: str) -> bool:
    return host.strip("[]").lower() in LOOPBACK_HOSTS


def host_name(value: str) -> str:
    """The host part of a Host header (`[::1]:8000` -> `::1`, `Example.org:80` -> `example.org`)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostPolicy:
    """Which Host headers and Origins are answered (see the module doc)."""

    def __init__(self, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> None:
        hosts = {host_name(h) for h in allowed_hosts if h.strip()}  # a port in an entry is ignored
        self.any_host = ANY in hosts
        self.hosts = frozenset(hosts - {ANY}) | LOOPBACK_HOSTS
        origins = {o.strip().rstrip("/").lower() for o in allowed_origins if o.strip()}
        self.any_origin = ANY in origins
        self.origins = frozenset(origins - {ANY})

    def host_ok(self, header: str | None) -> bool:
        return self.any_host or (header is not None and host_name(header) in self.hosts)

    def origin_ok(self, header: str | None) -> bool:
        return header is None or self.any_origin or header.strip().rstrip("/").lower() in self.origins


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}


async def _refuse(send: Send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           *((k.encode(), v.encode()) for k, v in (headers or {}).items())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: Host and Origin first, then a bounded body (see the module doc)."""

    def __init__(self, app: ASGIApp, policy: HostPolicy, max_body: int, body_seconds: float = BODY_SECONDS) -> None:
        self.app = app
        self.policy = policy
        self.max_body = max_body
        self.body_seconds = body_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            headers = _headers(scope)
            if not (self.policy.host_ok(headers.get("host")) and self.policy.origin_ok(headers.get("origin"))):
                await receive()  # websocket.connect; closing before accepting refuses the handshake
                await send({"type": "websocket.close", "code": 1008, "reason": "forbidden Host or Origin"})
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if not self.policy.host_ok(headers.get("host")):
            await _refuse(send, 421, "invalid Host header: this server is not reached by that name "
                                     "(the server's --allowed-host list names the ones it is)")
            return
        if not self.policy.origin_ok(headers.get("origin")):
            await _refuse(send, 403, "forbidden Origin: requests from web pages on other origins are refused "
                                     "(the server's --allowed-origin list names the ones accepted)")
            return
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                await _refuse(send, 400, "invalid Content-Length")
                return
            if int(length) > self.max_body:
                await _refuse(send, 413, f"request body of {int(length)} bytes is over the limit of "
                                         f"{self.max_body} bytes", {"connection": "close"})
                return
        await self.app(scope, self._bounded(receive), send)

    def _bounded(self, receive: Receive) -> Receive:
        seen = 0
        done = False
        deadline: float | None = None
        loop = asyncio.get_running_loop()

        async def bounded() -> Message:
            nonlocal seen, done, deadline
            if done:  # the body is complete; a later receive only waits for the client to hang up
                return await receive()
            if deadline is None:
                deadline = loop.time() + self.body_seconds
            try:
                async with asyncio.timeout_at(deadline):  # a timer, not a task: the fast path stays fast
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, f"the request body did not arrive within {self.body_seconds:g} s") from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise HTTPException(413, f"request body over the limit of {self.max_body} bytes")
                done = not message.get("more_body", False)
            return message

        return bounded


class _HeadDeadline:
    """Mixed into a uvicorn HTTP protocol: each request head within header_seconds and max_head_bytes.

    The deadline is armed when the connection opens and after each response; it is disarmed when
    the protocol starts a new request cycle (its head is complete). Bytes that arrive while a head
    is awaited are all head bytes, so counting them bounds the head's size whatever the parser.
    """

    header_seconds = HEADER_SECONDS
    max_head_bytes = MAX_HEAD_BYTES
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._waiting_for = self.cycle
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.header_seconds, self._head_expired)

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.cycle is self._waiting_for and not self.transport.is_closing():
            self.transport.close()  # no request head arrived in time: nothing was started, nothing is lost

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._head_timer is None:
            return
        if self.cycle is not self._waiting_for:
            self._disarm()  # a request head arrived
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self._disarm()
            self.transport.close()

    def on_response_complete(self) -> None:
        self._arm()  # before pipelined heads are parsed: a new cycle makes the deadline moot
        super().on_response_complete()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]


class GuardedH11Protocol(_HeadDeadline, H11Protocol):
    """uvicorn's pure-Python h11 protocol with the head deadline."""


def guarded_protocol() -> type:
    """uvicorn's fastest HTTP/1.1 protocol here (httptools when installed, as uvicorn's "auto"), guarded."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return GuardedH11Protocol
    return type("GuardedHttpToolsProtocol", (_HeadDeadline, HttpToolsProtocol),
                {"__doc__": "uvicorn's httptools protocol with the head deadline."})

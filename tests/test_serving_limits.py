"""The served world against hostile clients: floods, an agent attacking its own grading, foreign
Origins and Hosts, huge or slow requests, idle connections (issue 35, criteria 1 to 3).

Each test is a reproduction from the outside test turned around: it runs the real app under
uvicorn (with the same per-connection options `serve` uses) on a loopback port and attacks it over
real HTTP or a raw socket, with the SDK's MCP client where an agent matters. One test runs the
real `worldfactory serve` command, confined, off loopback, with its flags.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests import test_serving as serving
from tests.conftest import PYTHON
from worldfactory.runtime.control import ServeOptions, create_app, uvicorn_options
from worldfactory.runtime.http_guards import guarded_protocol
from worldfactory.runtime.sessions import ELIDED, HEADROOM_RESERVE, TRACE_ARGS_BYTES, memory_used
from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"
TOKEN = "limits-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
MCP = {"accept": "application/json, text/event-stream"}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class QuickHeads(guarded_protocol()):  # type: ignore[misc]
    header_seconds = 0.5


class Server(serving.Server):  # its start and stop; serve's own connection options here
    """The app under uvicorn with serve's connection options (head deadline shortened for the tests)."""

    def __init__(self, world: World, memory_limit_bytes: int | None = None, **options: Any) -> None:
        self.clock = FakeClock()
        self.app = create_app(world, TOKEN, clock=self.clock, memory_limit_bytes=memory_limit_bytes, **options)
        self.store = self.app.state.store
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = {**uvicorn_options(self.app.state.options), "http": QuickHeads}
        self.server = uvicorn.Server(uvicorn.Config(self.app, **config))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[Server]:
    with Server(world) as s:
        yield s


def _rpc(id_: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


def _init(http: httpx2.Client, path: str = "/mcp", **headers: str) -> httpx2.Response:
    return http.post(path, json=_rpc(0, "initialize", INIT), headers={**MCP, **headers})


def _oracle_task(world: World) -> Any:
    return next(t for t in world.tasks.values() if t.answer is None and t.oracle and 1 <= len(t.oracle) <= 10
                and any(not world.tools_by_name[c.tool]["annotations"]["read_only_hint"] for c in t.oracle))


# --- 1. bounded capacity ------------------------------------------------------------------------------------

def test_session_flood_gets_503_and_the_control_plane_keeps_answering(world: World) -> None:
    """The planted flood: open free-form sessions up to the cap and past it."""
    with Server(world, max_sessions=12, max_free_sessions=6) as s, httpx2.Client(base_url=s.url, timeout=10) as http:
        sids = []
        for _ in range(6):
            r = _init(http)
            assert r.status_code == 200, r.text
            sids.append(r.headers["mcp-session-id"])
        for _ in range(5):  # the flood goes on past the cap
            r = _init(http)
            assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
            assert "maximum of 6 free-form MCP sessions" in r.json()["error"]["message"]
        assert len(s.store) == 6 and s.store.refused == 5
        assert http.get("/healthz").status_code == 200
        made = http.post("/control/episodes", json={"task_id": _oracle_task(world).task_id}, headers=AUTH)
        assert made.status_code == 201  # the flood left the control plane its room
        ping = http.post("/mcp", json=_rpc(1, "ping"), headers={**MCP, "mcp-session-id": sids[0]})
        assert ping.json()["result"] == {}  # the sessions already open keep working
        for _ in range(5):
            assert http.post("/control/episodes", json={}, headers=AUTH).status_code == 201
        full = http.post("/control/episodes", json={}, headers=AUTH)  # 6 + 6 = 12 held: the whole cap
        assert full.status_code == 503 and int(full.headers["retry-after"]) > 0
        eid = made.json()["episode_id"]
        assert http.get(f"/control/episodes/{eid}/trace", headers=AUTH).status_code == 200
        assert http.post(f"/control/episodes/{eid}/verify", json={"answer": None}, headers=AUTH).status_code == 200
        assert http.get("/healthz").json()["episodes"] == 12
        assert http.delete("/mcp", headers={"mcp-session-id": sids[0]}).status_code == 204
        assert _init(http).status_code == 200  # a freed place is taken again


def test_admission_stops_at_memory_headroom(world: World) -> None:
    """Below the cap, a new episode still needs memory headroom under the process's limit."""
    with Server(world) as s, httpx2.Client(base_url=s.url, timeout=10) as http:
        assert _init(http).status_code == 200
        s.store.memory_limit = memory_used() + HEADROOM_RESERVE + s.store.session_bytes // 2  # all but full
        for request in (lambda: _init(http), lambda: http.post("/control/episodes", json={}, headers=AUTH)):
            refused = request()
            assert refused.status_code == 503 and int(refused.headers["retry-after"]) > 0
            assert "memory limit" in refused.text
        assert len(s.store) == 1 < s.store.max_free and http.get("/healthz").status_code == 200
        s.store.memory_limit = memory_used() + HEADROOM_RESERVE + 64 * s.store.session_bytes  # room again
        assert _init(http).status_code == 200


def test_free_form_sessions_expire_sooner_than_episodes(world: World) -> None:
    with Server(world, idle_seconds=1000, free_idle_seconds=100) as s, httpx2.Client(base_url=s.url) as http:
        sid = _init(http).headers["mcp-session-id"]
        eid = http.post("/control/episodes", json={}, headers=AUTH).json()["episode_id"]
        s.clock.now += 101
        assert http.post("/mcp", json=_rpc(1, "ping"), headers={**MCP, "mcp-session-id": sid}).status_code == 404
        assert http.post(f"/control/episodes/{eid}/reset", headers=AUTH).status_code == 200
        s.clock.now += 1000
        assert http.post(f"/control/episodes/{eid}/reset", headers=AUTH).status_code == 404


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_idle_and_slow_connections_are_closed_and_capped(world: World) -> None:
    """Connections that never send a whole request head are closed; past the cap new ones get 503."""
    with Server(world, max_connections=4) as s:
        idle = _connect(s.port)
        slow = _connect(s.port)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert _closed_within(idle, 3) and _closed_within(slow, 3)
        QuickHeads.header_seconds = 30  # a head past 16 KiB is cut off at once, long before its deadline
        try:
            huge = _connect(s.port)
            try:
                huge.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (256 << 10))
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert _closed_within(huge, 5)
        finally:
            QuickHeads.header_seconds = 0.5
        held = [_connect(s.port) for _ in range(4)]
        time.sleep(0.1)
        with httpx2.Client(base_url=s.url) as http:
            assert http.get("/healthz").status_code == 503  # uvicorn's connection cap
            for sock in held:
                assert _closed_within(sock, 3)
            assert http.get("/healthz").status_code == 200  # the held ones timed out: the server recovered
        kept = _connect(s.port)  # a keep-alive connection that sends its requests in time stays open
        for _ in range(3):
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert b"200 OK" in kept.recv(4096)
            time.sleep(0.3)
        kept.close()


def test_bodies_are_refused_by_length_and_while_streaming(world: World) -> None:
    with Server(world, max_body=64 << 10, body_seconds=0.5) as s:
        sock = _connect(s.port)  # 1 GiB announced, nothing sent: refused before a byte is read
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1073741824\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")
        sock.close()
        sock = _connect(s.port)  # chunked (no length): refused once past the limit, long before the end
        sock.sendall(b"POST /control/episodes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                     TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (16 << 10, b" " * (16 << 10))
        answer = b""
        for _ in range(64):  # 1 MiB offered, 64 KiB allowed
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.settimeout(0.05)
            try:
                answer += sock.recv(4096)
            except TimeoutError:
                continue
            if answer:
                break
        sock.settimeout(2)
        if not answer:
            answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        sock.close()
        sock = _connect(s.port)  # a body that stops coming: 408 after body_seconds
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        sock.settimeout(3)
        assert sock.recv(4096).startswith(b"HTTP/1.1 408")
        sock.close()
        assert len(s.store) == 0


def test_trace_keeps_large_arguments_as_hash_and_size(server: Server, world: World) -> None:
    task = _oracle_task(world)
    with httpx2.Client(base_url=server.url, timeout=30) as http:
        made = http.post("/control/episodes", json={"task_id": task.task_id}, headers=AUTH).json()
        url = made["mcp_url"]
        sid = _init(http, url).headers["mcp-session-id"]
        big = {"query": "x" * (3 << 20)}  # 3 MB of arguments, invalid for any tool
        small = task.oracle[0]
        for name, args in ((small.tool, big), (small.tool, small.args)):
            r = http.post(url, json=_rpc(1, "tools/call", {"name": name, "arguments": args}),
                          headers={**MCP, "mcp-session-id": sid})
            assert r.status_code == 200
        trace = http.get(f"/control/episodes/{made['episode_id']}/trace", headers=AUTH).text
        lines = [json.loads(x) for x in trace.splitlines()]
        assert len(trace) < 4 * TRACE_ARGS_BYTES
        assert lines[1]["args"][ELIDED]["bytes"] == len(json.dumps(big, sort_keys=True))
        assert len(lines[1]["args"][ELIDED]["sha256"]) == 64
        assert lines[2]["args"] == small.args  # ordinary arguments are kept whole: replay needs them
        http.delete(f"/control/episodes/{made['episode_id']}", headers=AUTH)


# --- 2. the episode belongs to the harness ------------------------------------------------------------------

def test_agent_cannot_end_or_address_its_episode_through_mcp(server: Server, world: World) -> None:
    """The planted DELETE: the episode id is in the agent's own mcp_url."""
    task = _oracle_task(world)
    with httpx2.Client(base_url=server.url, timeout=30) as http:
        made = http.post("/control/episodes", json={"task_id": task.task_id}, headers=AUTH).json()
        eid, url = made["episode_id"], made["mcp_url"]

        async def agent() -> None:
            async with Client(server.url + url) as c:
                for call in task.oracle:
                    assert not (await c.call_tool(call.tool, call.args)).is_error

        anyio.run(agent)
        # the attacks: the episode id as a free-form session id
        assert http.delete("/mcp", headers={"mcp-session-id": eid}).status_code == 404
        call = _rpc(1, "tools/call", {"name": task.oracle[0].tool, "arguments": task.oracle[0].args})
        assert http.post("/mcp", json=call, headers={**MCP, "mcp-session-id": eid}).status_code == 404
        assert http.post("/mcp", json=_rpc(2, "ping"), headers={**MCP, "mcp-session-id": eid}).status_code == 404
        assert http.delete(url, headers={"mcp-session-id": eid}).status_code == 404
        # DELETE at the mcp_url ends that MCP session only
        sid = _init(http, url).headers["mcp-session-id"]
        assert http.delete(url, headers={"mcp-session-id": sid}).status_code == 204
        assert http.post(url, json=_rpc(3, "ping"), headers={**MCP, "mcp-session-id": sid}).status_code == 404
        # an agent re-initializing without end holds at most MAX_BOUND_SESSIONS: the oldest ends
        first = _init(http, url).headers["mcp-session-id"]
        for _ in range(20):
            _init(http, url)
        assert http.post(url, json=_rpc(4, "ping"), headers={**MCP, "mcp-session-id": first}).status_code == 404
        assert len(server.store.get(eid).mcp_sessions) <= 8
        verdict = http.post(f"/control/episodes/{eid}/verify", json={"answer": None}, headers=AUTH)
        assert verdict.status_code == 200 and verdict.json()["passed"] is True  # the grading is intact
        # and the control plane never addresses a free-form session
        free = _init(http).headers["mcp-session-id"]
        for method, path in (("POST", f"/control/episodes/{free}/verify"), ("POST", f"/control/episodes/{free}/reset"),
                             ("GET", f"/control/episodes/{free}/trace"), ("DELETE", f"/control/episodes/{free}")):
            assert http.request(method, path, json={}, headers=AUTH).status_code == 404
        assert http.post(f"/episodes/{free}/mcp", json=_rpc(0, "initialize", INIT), headers=MCP).status_code == 404
        assert http.delete("/mcp", headers={"mcp-session-id": free}).status_code == 204
        assert http.delete(f"/control/episodes/{eid}", headers=AUTH).status_code == 204


# --- 3. Origin and Host --------------------------------------------------------------------------------------

def test_foreign_origins_get_403(world: World) -> None:
    """The planted Origin: a page on another site tries to open sessions through a browser."""
    with Server(world, allowed_origins=("http://localhost:6274",)) as s, httpx2.Client(base_url=s.url) as http:
        for origin in ("http://evil.example", "null", "http://127.0.0.1.evil.example", "http://localhost:6275"):
            r = _init(http, origin=origin)
            assert r.status_code == 403 and "Origin" in r.json()["error"]
            made = http.post("/control/episodes", json={}, headers={**AUTH, "origin": origin})
            assert made.status_code == 403
        assert len(s.store) == 0  # nothing was opened
        assert _init(http, origin="http://localhost:6274").status_code == 200  # the allowed one
        assert _init(http).status_code == 200  # no Origin: not a browser


def test_off_loopback_needs_allowed_hosts_and_enforces_them(world: World) -> None:
    with pytest.raises(ValueError, match="--allowed-host"):
        ServeOptions(host="0.0.0.0")
    with Server(world, host="0.0.0.0", allowed_hosts=("world.example",)) as s, httpx2.Client(base_url=s.url) as http:
        assert _init(http, host="evil.example").status_code == 421  # DNS rebinding
        assert http.get("/healthz", headers={"host": "evil.example:80"}).status_code == 421
        assert _init(http, host="world.example:8000").status_code == 401  # the name is right; /mcp needs the token
        assert _init(http, host="world.example", **AUTH).status_code == 200
        assert _init(http, **AUTH).status_code == 200  # loopback names always pass
        assert http.get("/healthz", headers={"host": "WORLD.example"}).status_code == 200
    with Server(world, mcp_auth="token") as s, httpx2.Client(base_url=s.url) as http:  # on loopback, if asked
        assert _init(http).status_code == 401 and _init(http, **AUTH).status_code == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_command_applies_its_flags_confined(worlds_dir: Path) -> None:
    world = str(worlds_dir / WORLD)
    bare = subprocess.run([PYTHON, "-m", "worldfactory.cli", "serve", world, "--transport", "http",
                           "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "WORLDFACTORY_ALLOWED_HOSTS"})
    assert bare.returncode == 2 and "--allowed-host" in bare.stderr
    port = _free_port()
    env = dict(os.environ, WORLDFACTORY_CONTROL_TOKEN=TOKEN, WORLDFACTORY_ALLOWED_HOSTS="world.example")
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "serve", world, "--transport", "http", "--host",
                             "0.0.0.0", "--port", str(port), "--max-sessions", "4", "--max-free-sessions", "2"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx2.Client(base_url=url, timeout=10) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    health = http.get("/healthz", headers={"host": "world.example"})
                    break
                except httpx2.TransportError:
                    assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
                    time.sleep(0.1)
            assert health.json()["max_sessions"] == 4 and health.json()["max_free_sessions"] == 2
            assert http.get("/healthz", headers={"host": "evil.example"}).status_code == 421
            assert _init(http).status_code == 401
            assert _init(http, origin="http://evil.example", **AUTH).status_code == 403

            async def agent() -> int:
                async with httpx2.AsyncClient(headers=AUTH, timeout=10) as h, \
                        Client(streamable_http_client(f"{url}/mcp", http_client=h)) as c:
                    return len((await c.list_tools()).tools)

            assert anyio.run(agent) > 0  # the SDK's client, with the token
            assert [_init(http, **AUTH).status_code for _ in range(3)] == [200, 200, 503]
            codes = [http.post("/control/episodes", json={}, headers=AUTH).status_code for _ in range(3)]
            assert codes == [201, 201, 503]
            assert http.get("/healthz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)

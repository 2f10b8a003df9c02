"""Serving worlds over HTTP: one episode per MCP session, the control plane, expiry, load and faults.

Most tests run the real app under uvicorn in a thread on a loopback port (so the clock can be
a fake one) and talk to it over real HTTP, with the SDK's MCP client where a client matters;
one test runs `worldfactory serve --transport http` itself, confined, and replays a served
episode's trace with `worldfactory replay`.
"""

from __future__ import annotations

import asyncio
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

from tests.conftest import PYTHON
from worldfactory.env import EnvBatch, WorldEnv
from worldfactory.runtime.control import create_app
from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"
TOKEN = "test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Server:
    def __init__(self, world: World, idle_seconds: float = 3600.0, **options: Any) -> None:
        self.clock = FakeClock()
        self.app = create_app(world, TOKEN, idle_seconds=idle_seconds, clock=self.clock,
                              **{"free_idle_seconds": idle_seconds, **options})
        self.store = self.app.state.store
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=2048)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[Server]:
    with Server(world) as s:
        yield s


def _write(world: World) -> tuple[str, dict[str, Any]]:
    """A state-changing call that succeeds once on the seed and fails when repeated (wrong state)."""
    t = next(t for t in world.tool_manifest if t["kind"] == "transition" and t["examples"]["valid"])
    return t["name"], t["examples"]["valid"]


def _rpc(id_: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


async def _session(http: httpx2.AsyncClient, path: str = "/mcp") -> str:
    r = await http.post(path, json=_rpc(0, "initialize", INIT), headers=MCP_HEADERS)
    assert r.status_code == 200, r.text
    return r.headers["mcp-session-id"]


async def _call(http: httpx2.AsyncClient, sid: str, name: str, args: dict[str, Any], path: str = "/mcp") -> Any:
    r = await http.post(path, json=_rpc(1, "tools/call", {"name": name, "arguments": args}),
                        headers={**MCP_HEADERS, "mcp-session-id": sid})
    return r


# --- one session, one episode ---------------------------------------------------------------------------

def test_sessions_are_isolated(server: Server, world: World) -> None:
    name, args = _write(world)

    async def main() -> None:
        url = f"{server.url}/mcp"
        async with Client(url) as a, Client(url) as b:
            tools = {t.name for t in (await a.list_tools()).tools}
            assert name in tools and not {"verify", "reset", "grade"} & tools
            first = await a.call_tool(name, args)
            assert not first.is_error, first.content
            again = await a.call_tool(name, args)
            assert again.is_error  # a's own write is visible to a
            other = await b.call_tool(name, args)
            assert not other.is_error, "session b saw session a's write"
        async with Client(url) as c:  # a new session after the others left starts from the seed
            assert not (await c.call_tool(name, args)).is_error

    anyio.run(main)


def test_thousand_concurrent_sessions(server: Server, world: World) -> None:
    name, args = _write(world)
    n = 1000
    before = len(server.store)

    async def one(http: httpx2.AsyncClient) -> tuple[bool, bool]:
        sid = await _session(http)
        first = (await _call(http, sid, name, args)).json()["result"]["isError"]
        second = (await _call(http, sid, name, args)).json()["result"]["isError"]
        return first, second

    async def main() -> list[tuple[bool, bool]]:
        limits = httpx2.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx2.AsyncClient(base_url=server.url, limits=limits, timeout=60) as http:
            return list(await asyncio.gather(*(one(http) for _ in range(n))))

    results = asyncio.run(main())  # how fast: bench/serve_bench.py (tests check behaviour, not timing)
    assert len(server.store) - before == n  # held at once
    # every session's first write succeeded (no other session's write reached it), its repeat failed
    assert results == [(False, True)] * n
    for key in list(server.store._items)[-n:]:
        server.store.close(key)


# --- expiry --------------------------------------------------------------------------------------------

def test_idle_sessions_expire_on_time(world: World) -> None:
    name, args = _write(world)
    with Server(world, idle_seconds=100) as s:
        async def main() -> None:
            async with httpx2.AsyncClient(base_url=s.url) as http:
                sid = await _session(http)
                made = (await http.post("/control/episodes", json={}, headers=AUTH)).json()
                s.clock.now += 99
                assert (await _call(http, sid, name, args)).status_code == 200  # used: its idle time restarts
                assert len(s.store) == 2  # idle 99 s of 100: both still held
                s.clock.now += 2  # the control episode has been idle 101 s, the MCP session 2 s
                r = await http.post(f"/control/episodes/{made['episode_id']}/reset", headers=AUTH)
                assert r.status_code == 404 and len(s.store) == 1
                assert (await _call(http, sid, name, args)).status_code == 200
                s.clock.now += 100
                assert s.store.sweep() == 1 and len(s.store) == 0  # freed without any request to it
                r = await _call(http, sid, name, args)
                assert r.status_code == 404
                sid2 = await _session(http)  # a new session starts from the seed
                assert (await _call(http, sid2, name, args)).json()["result"]["isError"] is False

        anyio.run(main)


# --- faults --------------------------------------------------------------------------------------------

def _raw(port: int, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        if not read:
            return b""
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
                    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    if len(body) >= length:
                        break
        except TimeoutError:
            pass
        return b"".join(chunks)


def _post(sid: str, body: bytes, length: int | None = None) -> bytes:
    return (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode() + body


def test_disconnect_mid_call_leaves_the_session_consistent(server: Server, world: World) -> None:
    name, args = _write(world)
    call = json.dumps(_rpc(7, "tools/call", {"name": name, "arguments": args})).encode()

    async def sid() -> str:
        async with httpx2.AsyncClient(base_url=server.url) as http:
            return await _session(http)

    # hang up halfway through the request body: the call never ran
    s1 = anyio.run(sid)
    _raw(server.port, _post(s1, call[: len(call) // 2], len(call)), read=False)
    # hang up right after sending the whole request, before the answer: the call ran whole, or not at all
    s2 = anyio.run(sid)
    _raw(server.port, _post(s2, call), read=False)
    time.sleep(0.3)

    async def after() -> tuple[Any, Any]:
        async with httpx2.AsyncClient(base_url=server.url) as http:
            r1 = (await _call(http, s1, name, args)).json()["result"]
            r2 = (await _call(http, s2, name, args)).json()["result"]
            return r1, r2

    r1, r2 = anyio.run(after)
    assert r1["isError"] is False  # the half-sent call changed nothing
    assert r2["isError"] is True  # the whole call had landed; a repeat is refused by state, not by a broken session
    for key in (s1, s2):
        served = server.store.get(key)
        assert served is not None and served.episode.conn.in_transaction  # the episode's transaction is intact
        server.store.close(key)


def test_malformed_frames_do_not_kill_the_server(server: Server) -> None:
    port = server.port
    for junk in (b"\x00\xff garbage \r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                 b"POST /mcp HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                 b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\n{{{{{"):
        _raw(port, junk)
    with httpx2.Client(base_url=server.url) as http:
        def post(body: Any, sid: str | None = None) -> httpx2.Response:
            headers = {**MCP_HEADERS, **({"mcp-session-id": sid} if sid else {})}
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return http.post("/mcp", content=content, headers={**headers, "content-type": "application/json"})

        assert post(b"{not json").json()["error"]["code"] == -32700
        assert post(b"\xff\xfe").status_code == 400
        assert post([_rpc(1, "ping")]).json()["error"]["code"] == -32600  # batches are refused
        assert post({"jsonrpc": "1.0", "id": 1, "method": "ping"}).status_code == 400
        assert post({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}).status_code == 400
        assert post({"jsonrpc": "2.0", "id": 1, "method": 5}).status_code == 400
        assert post(_rpc(1, "tools/list")).status_code == 400  # no session
        assert post(_rpc(1, "tools/list"), sid="nope").status_code == 404
        init = post(_rpc(1, "initialize", INIT))
        sid = init.headers["mcp-session-id"]
        not_object = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": []}
        assert post(not_object, sid).json()["error"]["code"] == -32602
        assert post(_rpc(3, "tools/call", {"arguments": {}}), sid).json()["error"]["code"] == -32602
        assert post(_rpc(4, "no/such"), sid).json()["error"]["code"] == -32601
        bad = post(_rpc(5, "tools/call", {"name": "search_claims", "arguments": {"nope": [1] * 10}}), sid).json()
        assert bad["result"]["isError"] is True
        assert post(_rpc(6, "tools/call", {"name": "verify", "arguments": {}}), sid).json()["result"]["isError"]
        assert post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid).status_code == 202
        assert http.get("/mcp", headers=MCP_HEADERS).status_code == 405
        assert http.post("/mcp", content=b"x" * (5 << 20), headers=MCP_HEADERS).status_code == 413
        rebound = http.post("/mcp", json=_rpc(1, "ping"), headers={**MCP_HEADERS, "host": "evil.example"})
        assert rebound.status_code == 421
        assert post(_rpc(7, "ping"), sid).json()["result"] == {}
        assert http.delete("/mcp", headers={"mcp-session-id": sid}).status_code == 204
        assert post(_rpc(8, "ping"), sid).status_code == 404
        assert http.get("/healthz").json()["ok"] is True


# --- the control plane ---------------------------------------------------------------------------------

def test_control_plane_needs_the_token(server: Server, world: World) -> None:
    task_id = next(iter(world.tasks))
    with httpx2.Client(base_url=server.url) as http:
        made = http.post("/control/episodes", json={"task_id": task_id}, headers=AUTH).json()
        eid = made["episode_id"]
        held = len(server.store)
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN},
                        {"authorization": f"Basic {TOKEN}"}):
            for method, path, body in (("POST", "/control/episodes", {"task_id": task_id}),
                                       ("POST", f"/control/episodes/{eid}/verify", {"answer": None}),
                                       ("POST", f"/control/episodes/{eid}/reset", None),
                                       ("GET", f"/control/episodes/{eid}/trace", None),
                                       ("DELETE", f"/control/episodes/{eid}", None),
                                       ("GET", "/control/tasks", None)):
                r = http.request(method, path, json=body, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.status_code)
                assert r.headers["www-authenticate"].startswith("Bearer")
        assert len(server.store) == held and eid in server.store  # nothing changed
        # an agent holding only the mcp_url reaches no control endpoint through it
        mcp = made["mcp_url"]
        for path in (f"{mcp}/verify", f"{mcp}/../reset", mcp.replace("/mcp", "/verify")):
            assert http.post(path, json={"answer": None}).status_code in (404, 405)
        assert http.delete(f"/control/episodes/{eid}", headers=AUTH).status_code == 204


def test_control_plane_episode_lifecycle(server: Server, world: World, tmp_path: Path) -> None:
    task = next(t for t in world.tasks.values() if t.answer is None and t.oracle and len(t.oracle) <= 20)
    with httpx2.Client(base_url=server.url, headers=AUTH) as http:
        r = http.post("/control/episodes", json={"task_id": task.task_id})
        assert r.status_code == 201
        made = r.json()
        assert set(made) >= {"episode_id", "instruction", "mcp_url"}
        assert made["instruction"] == task.instruction and made["mcp_url"] == f"/episodes/{made['episode_id']}/mcp"
        eid = made["episode_id"]

        async def agent() -> None:
            async with Client(server.url + made["mcp_url"]) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert not {"verify", "reset"} & names
                for call in task.oracle:
                    await c.call_tool(call.tool, call.args)

        anyio.run(agent)
        verdict = http.post(f"/control/episodes/{eid}/verify", json={"answer": None}).json()
        assert verdict == {"passed": True, "reward": 1.0, "mismatches": []}
        trace = http.get(f"/control/episodes/{eid}/trace")
        assert trace.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in trace.text.splitlines()]
        assert lines[0]["task_id"] == task.task_id and len(lines) == len(task.oracle) + 1
        # reset: the same task back at the seed; the trace starts again
        assert http.post(f"/control/episodes/{eid}/reset").json()["episode_id"] == eid
        assert len(http.get(f"/control/episodes/{eid}/trace").text.splitlines()) == 1
        if any(not world.tools_by_name[c.tool]["annotations"]["read_only_hint"] for c in task.oracle):
            again = http.post(f"/control/episodes/{eid}/verify", json={"answer": None}).json()
            assert again["passed"] is False and again["reward"] == 0.0 and again["mismatches"]
        free = http.post("/control/episodes", json={})
        assert free.status_code == 201 and free.json()["instruction"] == ""
        assert http.post(f"/control/episodes/{free.json()['episode_id']}/verify", json={}).status_code == 409
        assert http.post("/control/episodes", json={"task_id": "no-such-task"}).status_code == 404
        assert http.post("/control/episodes", content=b"[1]").status_code == 400
        for e in (eid, free.json()["episode_id"]):
            assert http.delete(f"/control/episodes/{e}").status_code == 204
        assert http.post(f"/control/episodes/{eid}/verify", json={}).status_code == 404
        r = http.post(made["mcp_url"], json=_rpc(1, "initialize", INIT), headers=MCP_HEADERS)
        assert r.status_code == 404
        tasks = http.get("/control/tasks").json()
        assert {t["task_id"] for t in tasks} == set(world.tasks)


# --- the Python API ---------------------------------------------------------------------------------------

def _oracle_task(world: World) -> Any:
    return next(t for t in world.tasks.values() if t.oracle and len(t.oracle) <= 20)


def test_env_in_process_and_remote(server: Server, world: World) -> None:
    task = _oracle_task(world)
    for env in (WorldEnv(world), WorldEnv(url=server.url, token=TOKEN)):
        with env:
            obs = env.reset(task_id=task.task_id)
            assert obs["instruction"] == task.instruction
            assert {t["name"] for t in obs["tools"]} == set(world.tools_by_name)
            for call in task.oracle:
                out = env.step({"name": call.tool, "arguments": call.args})
                assert set(out) == {"ok", "result", "error"}
            assert env.verify(task.answer) == 1.0
            env.reset(task_id=task.task_id)
            out = env.step({"function": {"name": "search_claims", "arguments": "{\"nope\": 1}"}})
            assert out["ok"] is False
            drawn = env.reset(seed=3)["task_id"]
            assert drawn == env.reset(seed=3)["task_id"]


def test_env_batch_against_the_server(server: Server, world: World) -> None:
    task = _oracle_task(world)
    n = 16

    async def main() -> list[float]:
        batch = EnvBatch(n, url=server.url, token=TOKEN)
        try:
            obs = await batch.reset([task.task_id] * n)
            assert len({o["episode_id"] for o in obs}) == n
            for call in task.oracle:
                await batch.step([{"name": call.tool, "arguments": call.args}] * (n // 2) + [None] * (n // 2))
            return await batch.verify([task.answer] * n)
        finally:
            await batch.close()

    rewards = asyncio.run(main())
    assert rewards[: n // 2] == [1.0] * (n // 2)
    assert sum(rewards[n // 2:]) <= n // 2


# --- the real command, confined ---------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_command_control_plane_and_replay(worlds_dir: Path, world: World, tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "WORLDFACTORY_CONTROL_TOKEN"}
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD), "--transport", "http",
                             "--port", str(port), "--idle-timeout", "600"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        token = ""
        deadline = time.monotonic() + 30
        while not token and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                pytest.fail("server exited before printing its token")
            if "token:" in line:
                token = line.split("token:")[1].strip()
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        task = _oracle_task(world)
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            health = None
            while health is None:
                try:
                    health = http.get("/healthz").json()
                except httpx2.TransportError:
                    time.sleep(0.1)
            assert http.post("/control/episodes", json={}).status_code == 401
            headers = {"authorization": f"Bearer {token}"}
            made = http.post("/control/episodes", json={"task_id": task.task_id}, headers=headers).json()

            async def agent() -> None:
                async with Client(f"http://127.0.0.1:{port}{made['mcp_url']}") as c:
                    for call in task.oracle:
                        await c.call_tool(call.tool, call.args)

            anyio.run(agent)
            eid = made["episode_id"]
            verdict = http.post(f"/control/episodes/{eid}/verify", json={"answer": task.answer}, headers=headers)
            assert verdict.json()["passed"] is True
            trace = tmp_path / "served.jsonl"
            trace.write_text(http.get(f"/control/episodes/{eid}/trace", headers=headers).text)
        out = subprocess.run([PYTHON, "-m", "worldfactory.cli", "replay", str(trace), "--world",
                              str(worlds_dir / WORLD), "--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["identical"] is True and report["reward"] == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)

"""The OpenEnv adapter, driven by OpenEnv's own client (`MCPToolClient` over its /ws session protocol)
against OpenEnv's own server app, on a loopback port: reset, MCP-shaped tool calls, the verifier's
reward on submit, state, isolation between sessions, and errors."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from worldfactory.runtime.world import World

# OpenEnv (and the web stack it brings) is imported by these tests only, not when every xdist worker
# collects the suite: one group, on one worker.
pytestmark = pytest.mark.xdist_group("openenv")
WORLD = "insurance-claims.regional--v001"


@pytest.fixture(scope="module")
def server(worlds: dict[str, World]) -> Iterator[str]:
    import uvicorn

    from worldfactory.adapters.openenv_server import create_openenv_app

    app = create_openenv_app(worlds[WORLD])
    sock = socket.create_server(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, ws="websockets"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    srv.should_exit = True
    thread.join(timeout=10)
    sock.close()


def write_task(world: World) -> str:
    """A curated task whose oracle changes state (so doing nothing fails it) and asks no question."""
    curated = [json.loads(line)["task_id"] for line in world.files["curated_tasks.jsonl"].decode().splitlines()]
    for tid in curated:
        task = world.task(tid)
        if task.answer is None and world.episode(tid).verify(None).reward == 0.0:
            return tid
    raise AssertionError("no curated write task")


def test_openenv_client_runs_an_episode(server: str, worlds: dict[str, World]) -> None:
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    from worldfactory.adapters.openenv_server import SUBMIT, WorldEnvClient

    world = worlds[WORLD]
    task_id = write_task(world)
    oracle = world.task(task_id).oracle

    async def play() -> dict[str, object]:
        async with WorldEnvClient(base_url=server) as agent, MCPToolClient(base_url=server) as idle:
            tools = await agent.list_tools()
            assert [t.name for t in tools] == [t["name"] for t in world.tool_manifest] + [SUBMIT]
            assert tools[0].input_schema == world.tool_manifest[0]["input_schema"]
            first = await agent.reset(task_id=task_id)
            assert first.observation.metadata["instruction"] == world.task(task_id).instruction
            await idle.reset(task_id=task_id)
            latencies = []
            for call in oracle:
                start = time.perf_counter()
                await agent.call_tool(call.tool, **call.args)
                latencies.append(time.perf_counter() - start)
            # The idle session shares the server, not the episode: the agent's writes are not its writes.
            idle_end = await idle.step(CallToolAction(tool_name=SUBMIT, arguments={"answer": None}))
            end = await agent.step(CallToolAction(tool_name=SUBMIT, arguments={"answer": None}))
            state = await agent.state()
            after = await agent.step(CallToolAction(tool_name=oracle[0].tool, arguments=oracle[0].args))
            return {"end": end, "idle": idle_end, "state": state, "after": after, "latencies": latencies}

    out = asyncio.run(play())
    end, idle = out["end"], out["idle"]
    assert end.done is True and end.reward == 1.0 and end.observation.result["passed"] is True
    assert idle.done is True and idle.reward == 0.0 and idle.observation.result["mismatches"]
    assert out["state"].step_count == len(oracle) + 1
    assert out["after"].observation.error is not None and "episode has ended" in out["after"].observation.error.message
    print(f"OpenEnv call_tool over /ws: p50 {statistics.median(out['latencies']) * 1000:.2f} ms "
          f"over {len(out['latencies'])} calls")


def test_openenv_errors_and_http_routes(server: str, worlds: dict[str, World]) -> None:
    import httpx2
    from openenv.core.generic_client import GenericEnvClient
    from openenv.core.mcp_client import MCPToolClient

    world = worlds[WORLD]

    async def play() -> None:
        async with MCPToolClient(base_url=server) as env:
            with pytest.raises(RuntimeError, match="call reset"):
                await env.call_tool(world.tool_manifest[0]["name"])
            await env.reset(seed=3)
            with pytest.raises(RuntimeError, match="no tool 'drop_tables'"):
                await env.call_tool("drop_tables")
            refused = await env.call_tool(world.tool_manifest[0]["name"], no_such_argument=1)
            assert "no_such_argument" in refused["error"]
            state = await env.state()
            assert state.step_count == 2  # the refused call counts as a step; the unknown tool too
        async with GenericEnvClient(base_url=server) as env:  # the plain client sees the task too
            obs = (await env.reset(task_id=sorted(world.tasks)[0])).observation
            assert obs["instruction"] == world.task(obs["task_id"]).instruction
            with pytest.raises(Exception, match="no task 'no-such-task'"):
                await env.reset(task_id="no-such-task")

    asyncio.run(play())
    # Seeded draws are repeatable and come from the curated tasks.
    r1 = httpx2.post(f"{server}/reset", json={"seed": 7}).json()
    r2 = httpx2.post(f"{server}/reset", json={"seed": 7}).json()
    curated = {json.loads(line)["task_id"] for line in world.files["curated_tasks.jsonl"].decode().splitlines()}
    assert r1["observation"]["task_id"] == r2["observation"]["task_id"] in curated
    assert httpx2.get(f"{server}/health").json()["status"] == "healthy"
    assert httpx2.get(f"{server}/metadata").json()["name"] == WORLD


def test_serve_openenv_beside_mcp_from_the_command_line(worlds_dir, worlds: dict[str, World]) -> None:
    """`worldfactory serve --transport http --openenv` (the real CLI, confined as it always is): OpenEnv's
    client plays an episode over /ws, MCP and the control plane answer on the same port, /metadata is
    filled, and a web page on another origin can open neither a WebSocket nor a request."""
    import os
    import subprocess
    import sys

    import httpx2
    import websockets
    from openenv.core.env_server.mcp_types import CallToolAction

    from worldfactory.adapters.openenv_server import SUBMIT, WorldEnvClient

    world = worlds[WORLD]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([sys.executable, "-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD),
                             "--transport", "http", "--port", str(port), "--openenv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WORLDFACTORY_CONTROL_TOKEN": "tok"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            try:
                if httpx2.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except Exception:  # noqa: BLE001 (not up yet)
                time.sleep(0.2)
        meta = httpx2.get(f"{base}/metadata").json()
        manifest = json.loads(world.files["world.json"])
        assert meta["readme_content"] == world.files["README.md"].decode()
        assert meta["version"].startswith(f"{manifest['generator_version']}+")
        assert httpx2.get(f"{base}/healthz").json()["world_id"] == WORLD  # ours, beside OpenEnv's /health
        tasks = httpx2.get(f"{base}/control/tasks", headers={"authorization": "Bearer tok"})
        assert tasks.status_code == 200 and len(tasks.json()) == len(world.tasks)
        init = httpx2.post(f"{base}/mcp", json=_rpc(1, "initialize", INIT),
                           headers={"accept": "application/json, text/event-stream"})
        assert init.status_code == 200  # MCP on the same port
        task_id = write_task(world)

        async def play() -> float | None:
            async with WorldEnvClient(base_url=base) as env:
                await env.reset(task_id=task_id)
                for call in world.task(task_id).oracle:
                    await env.call_tool(call.tool, **call.args)
                end = await env.step(CallToolAction(tool_name=SUBMIT, arguments={"answer": None}))
                return end.reward

        assert asyncio.run(play()) == 1.0

        async def from_page(origin: str) -> str:
            try:
                async with websockets.connect(f"ws://127.0.0.1:{port}/ws", origin=origin) as ws:
                    await ws.close()
                    return "open"
            except websockets.exceptions.InvalidStatus as exc:
                return str(exc.response.status_code)

        assert asyncio.run(from_page("http://evil.example")) == "403"  # the guard, before OpenEnv sees it
        assert httpx2.get(f"{base}/metadata", headers={"origin": "http://evil.example"}).status_code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _rpc(id_: int, method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}

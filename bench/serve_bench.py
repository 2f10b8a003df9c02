"""What serving costs: memory per session, sessions held, MCP call latency over HTTP, verify latency.

Starts `worldfactory serve WORLD --transport http` (confined, as users run it) on a loopback port and
prints: the server's resident memory before and after opening SESSIONS MCP sessions (each
initialised and given one write), so the memory per session; p50/p99 of a `tools/call` over HTTP
from a lean keep-alive client (the server's own cost plus loopback) and from the SDK's `mcp.Client`
(whose own per-call overhead is most of its figure); and p50/p99 of the control plane's verify.

Usage: python bench/serve_bench.py [WORLD_PATH] [SESSIONS]   (default data/worlds/insurance-claims..., 1000)
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
from proctree import tree_memory_mib

TOKEN = "bench-token"
CALLS = 2000
SDK_CALLS = 300
VERIFIES = 300
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lean:
    """A keep-alive HTTP/1.1 JSON-RPC client on one connection (TCP_NODELAY)."""

    def __init__(self, port: int, path: str = "/mcp") -> None:
        self.c = http.client.HTTPConnection("127.0.0.1", port)
        self.c.connect()
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.path = path
        self.sid = ""
        self.n = 0

    def post(self, method: str, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        self.n += 1
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.sid:
            headers["mcp-session-id"] = self.sid
        self.c.request("POST", self.path, json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                                      "params": params}), headers)
        r = self.c.getresponse()
        return r, json.loads(r.read())

    def initialize(self) -> None:
        r, _ = self.post("initialize", INIT)
        self.sid = r.getheader("mcp-session-id")


async def open_sessions(port: int, n: int, tool: str, args: dict[str, Any]) -> float:
    async def one(http: httpx2.AsyncClient) -> None:
        r = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
                            headers={"accept": "application/json, text/event-stream"})
        sid = r.headers["mcp-session-id"]
        await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                      "params": {"name": tool, "arguments": args}},
                        headers={"accept": "application/json, text/event-stream", "mcp-session-id": sid})

    started = time.perf_counter()
    limits = httpx2.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120) as http:
        await asyncio.gather(*(one(http) for _ in range(n)))
    return time.perf_counter() - started


async def sdk_latency(port: int, tool: str, args: dict[str, Any]) -> list[float]:
    from mcp import Client

    out = []
    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
        for _ in range(20):
            await client.call_tool(tool, args)
        for _ in range(SDK_CALLS):
            t = time.perf_counter()
            await client.call_tool(tool, args)
            out.append(time.perf_counter() - t)
    return out


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("data/worlds/insurance-claims.regional--v001")
    sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    tools = json.loads((path / "tools.json").read_text())
    read = next(t for t in tools if t["name"].startswith("get_") and t["examples"]["valid"])
    write = next(t for t in tools if t["kind"] == "transition" and t["examples"]["valid"])
    tasks = [json.loads(x) for x in (path / "tasks.jsonl").read_text().splitlines() if x.strip()]
    task = next(t for t in tasks if t["answer"] is None and 1 <= len(t["oracle"]) <= 10)
    port = free_port()
    env = dict(os.environ, WORLDFACTORY_CONTROL_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "worldfactory.cli", "serve", str(path), "--transport", "http",
                             "--port", str(port)], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with httpx2.Client(base_url=f"http://127.0.0.1:{port}") as h:
                    h.get("/healthz").raise_for_status()
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
                time.sleep(0.2)
        # latency first, on an otherwise idle server
        lean = Lean(port)
        lean.initialize()
        for _ in range(100):
            lean.post("tools/call", {"name": read["name"], "arguments": read["examples"]["valid"]})
        lat = []
        for _ in range(CALLS):
            t = time.perf_counter()
            _, body = lean.post("tools/call", {"name": read["name"], "arguments": read["examples"]["valid"]})
            lat.append(time.perf_counter() - t)
        assert body["result"]["isError"] is False, body
        sdk = asyncio.run(sdk_latency(port, read["name"], read["examples"]["valid"]))
        # verify through the control plane, on an episode that ran its task's oracle
        auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        ctl = http.client.HTTPConnection("127.0.0.1", port)
        ctl.request("POST", "/control/episodes", json.dumps({"task_id": task["task_id"]}), auth)
        made = json.loads(ctl.getresponse().read())
        agent = Lean(port, made["mcp_url"])
        agent.initialize()
        for call in task["oracle"]:
            agent.post("tools/call", {"name": call["tool"], "arguments": call["args"]})
        ver = []
        for _ in range(VERIFIES):
            t = time.perf_counter()
            ctl.request("POST", f"/control/episodes/{made['episode_id']}/verify", json.dumps({"answer": None}), auth)
            verdict = json.loads(ctl.getresponse().read())
            ver.append(time.perf_counter() - t)
        assert verdict["passed"], verdict
        # memory: sessions opened and each given one write, all held at once
        before = tree_memory_mib(proc.pid, "VmRSS")
        seconds = asyncio.run(open_sessions(port, sessions, write["name"], write["examples"]["valid"]))
        time.sleep(0.5)
        after = tree_memory_mib(proc.pid, "VmRSS")
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}") as h:
            held = h.get("/healthz").json()["episodes"]
        seed_kib = (path / "seed.db").stat().st_size / 1024
        print(f"world {path.name}: seed.db {seed_kib:.0f} KiB, {len(tools)} tools")
        print(f"HTTP tools/call, lean keep-alive client ({CALLS} calls): p50 {pct(lat, 0.5):.3f} ms, "
              f"p99 {pct(lat, 0.99):.3f} ms, mean {statistics.mean(lat) * 1000:.3f} ms")
        print(f"HTTP tools/call, mcp.Client ({SDK_CALLS} calls): p50 {pct(sdk, 0.5):.3f} ms, "
              f"p99 {pct(sdk, 0.99):.3f} ms")
        print(f"control-plane verify ({VERIFIES}, task {task['task_id']}, {len(task['oracle'])} oracle calls): "
              f"p50 {pct(ver, 0.5):.3f} ms, p99 {pct(ver, 0.99):.3f} ms")
        print(f"{sessions} sessions opened and used in {seconds:.1f} s; held {held}; server RSS {before:.0f} -> "
              f"{after:.0f} MiB: {(after - before) * 1024 / sessions:.0f} KiB a session")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()

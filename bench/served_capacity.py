"""Served capacity: how many sessions a server holds at its cap, their memory, and tool-call latency near it.

Starts `worldfactory serve WORLD --transport http` (confined, as users run it, under the confined
server's memory limit) on a loopback port, with its default caps unless --max-sessions is given, and:

1. fills it: free-form `/mcp` sessions up to --max-free-sessions and control-plane episodes for the
   rest of --max-sessions, each given one write (so its copy of the seed is touched);
2. checks it refuses politely at the cap: the next `/mcp` initialize and the next episode get 503
   with `Retry-After`, while /healthz and the control plane's other routes still answer (their
   latency at the cap is printed);
3. reports the server's resident memory (VmRSS) and address space (VmSize, what its RLIMIT_AS
   counts) before and after, so the memory per session;
4. ends sessions down to 90% of the cap and times `tools/call` (a point read) there from a lean
   keep-alive client (p50 / p99), and an `initialize` + first call of a new session;
5. with --connection-flood N, opens N connections that never send a request (more than the
   server's 8,192 open files) and reports how long until /healthz answers 200 again (the head
   deadline closes them).

Usage: python bench/served_capacity.py [WORLD_PATH] [--max-sessions N] [--max-free-sessions N]
                                       [--connection-flood N] [--json]
(default world: data/worlds/insurance-claims.regional--v001; default caps: the server's own).
"""

from __future__ import annotations

import argparse
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
AUTH = {"authorization": f"Bearer {TOKEN}"}
MCP = {"accept": "application/json, text/event-stream"}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
CALLS = 2000
PROBES = 200


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rpc(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


class Lean:
    """A keep-alive HTTP/1.1 JSON-RPC client on one connection (TCP_NODELAY)."""

    def __init__(self, port: int, path: str = "/mcp") -> None:
        self.c = http.client.HTTPConnection("127.0.0.1", port)
        self.c.connect()
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.path, self.sid, self.n = path, "", 0

    def post(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.n += 1
        headers = {"content-type": "application/json", **MCP, **({"mcp-session-id": self.sid} if self.sid else {})}
        self.c.request("POST", self.path, json.dumps(rpc(self.n, method, params)), headers)
        r = self.c.getresponse()
        body = json.loads(r.read())
        if method == "initialize" and r.status == 200:
            self.sid = r.getheader("mcp-session-id") or ""
        return r.status, body


async def fill(port: int, free: int, control: int, tool: str, args: dict[str, Any]) -> tuple[list[str], float]:
    """Open `free` /mcp sessions and `control` episodes, each given one write; returns the free session ids."""
    call = rpc(2, "tools/call", {"name": tool, "arguments": args})

    async def one_free(http: httpx2.AsyncClient) -> str:
        r = await http.post("/mcp", json=rpc(1, "initialize", INIT), headers=MCP)
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        await http.post("/mcp", json=call, headers={**MCP, "mcp-session-id": sid})
        return sid

    async def one_control(http: httpx2.AsyncClient) -> None:
        r = await http.post("/control/episodes", json={}, headers=AUTH)
        assert r.status_code == 201, r.text
        url = r.json()["mcp_url"]
        r = await http.post(url, json=rpc(1, "initialize", INIT), headers=MCP)
        await http.post(url, json=call, headers={**MCP, "mcp-session-id": r.headers["mcp-session-id"]})

    started = time.perf_counter()
    limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120) as http:
        sids = list(await asyncio.gather(*(one_free(http) for _ in range(free))))
        await asyncio.gather(*(one_control(http) for _ in range(control)))
    return sids, time.perf_counter() - started


def _health(port: int) -> str:
    try:
        return str(httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=3).status_code)
    except httpx2.HTTPError as exc:
        return type(exc).__name__


def connection_flood(port: int, n: int) -> dict[str, Any]:
    """Open n connections that send nothing; how long until /healthz is 200 again."""
    socks = []
    started = time.perf_counter()
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            continue
    opened = time.perf_counter()
    during = _health(port)
    while _health(port) != "200" and time.perf_counter() - opened < 120:
        time.sleep(0.5)
    recovered = time.perf_counter()
    for s in socks:
        s.close()
    return {"opened": len(socks), "open_seconds": round(opened - started, 1), "healthz_during": during,
            "recovered_after_seconds": round(recovered - opened, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("world", nargs="?", default="data/worlds/insurance-claims.regional--v001")
    ap.add_argument("--max-sessions", type=int)
    ap.add_argument("--max-free-sessions", type=int)
    ap.add_argument("--connection-flood", type=int, default=0, metavar="N")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    path = Path(a.world)
    tools = json.loads((path / "tools.json").read_text())
    read = next(t for t in tools if t["name"].startswith("get_") and t["examples"]["valid"])
    write = next(t for t in tools if t["kind"] == "transition" and t["examples"]["valid"])
    port = free_port()
    flags = [f for k, v in (("--max-sessions", a.max_sessions), ("--max-free-sessions", a.max_free_sessions))
             if v is not None for f in (k, str(v))]
    env = dict(os.environ, WORLDFACTORY_CONTROL_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "worldfactory.cli", "serve", str(path), "--transport", "http",
                             "--port", str(port), *flags], env=env, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx2.get(f"{base}/healthz").json()
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
                time.sleep(0.2)
        cap, free_cap = health["max_sessions"], health["max_free_sessions"]
        rss0, vm0 = tree_memory_mib(proc.pid, "VmRSS"), tree_memory_mib(proc.pid, "VmSize")
        sids, fill_s = asyncio.run(fill(port, free_cap, cap - free_cap, write["name"], write["examples"]["valid"]))
        time.sleep(0.5)
        rss1, vm1 = tree_memory_mib(proc.pid, "VmRSS"), tree_memory_mib(proc.pid, "VmSize")
        with httpx2.Client(base_url=base, timeout=30) as h:
            held = h.get("/healthz").json()["episodes"]
            over_free = h.post("/mcp", json=rpc(1, "initialize", INIT), headers=MCP)
            over_ctl = h.post("/control/episodes", json={}, headers=AUTH)
            health_ms, tasks_ms = [], []
            for _ in range(PROBES):
                t = time.perf_counter()
                assert h.get("/healthz").status_code == 200
                health_ms.append(time.perf_counter() - t)
                t = time.perf_counter()
                assert h.get("/control/tasks", headers=AUTH).status_code == 200
                tasks_ms.append(time.perf_counter() - t)
            # down to 90% of the cap: end free-form sessions
            target = int(cap * 0.9)
            for sid in sids[: max(0, held - target)]:
                assert h.delete("/mcp", headers={"mcp-session-id": sid}).status_code == 204
            at90 = h.get("/healthz").json()["episodes"]
        lean = Lean(port)
        t = time.perf_counter()
        status, _ = lean.post("initialize", INIT)
        assert status == 200
        lean.post("tools/call", {"name": read["name"], "arguments": read["examples"]["valid"]})
        first_ms = round((time.perf_counter() - t) * 1000, 3)
        for _ in range(100):
            lean.post("tools/call", {"name": read["name"], "arguments": read["examples"]["valid"]})
        lat = []
        for _ in range(CALLS):
            t = time.perf_counter()
            status, body = lean.post("tools/call", {"name": read["name"], "arguments": read["examples"]["valid"]})
            lat.append(time.perf_counter() - t)
        assert status == 200 and body["result"]["isError"] is False, body
        flood = connection_flood(port, a.connection_flood) if a.connection_flood else None
        report = {
            "world": path.name, "max_sessions": cap, "max_free_sessions": free_cap,
            "held_at_cap": held, "fill_seconds": round(fill_s, 1),
            "over_cap_free": {"status": over_free.status_code, "retry_after": over_free.headers.get("retry-after")},
            "over_cap_control": {"status": over_ctl.status_code, "retry_after": over_ctl.headers.get("retry-after")},
            "healthz_at_cap_ms": {"p50": pct(health_ms, 0.5), "p99": pct(health_ms, 0.99)},
            "control_tasks_at_cap_ms": {"p50": pct(tasks_ms, 0.5), "p99": pct(tasks_ms, 0.99)},
            "rss_mib": [round(rss0), round(rss1)], "vmsize_mib": [round(vm0), round(vm1)],
            "rss_kib_per_session": round((rss1 - rss0) * 1024 / held), "vmsize_kib_per_session":
                round((vm1 - vm0) * 1024 / held),
            "sessions_at_90pct": at90, "initialize_and_first_call_at_90pct_ms": first_ms,
            "tools_call_at_90pct_ms": {"calls": CALLS, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
                                       "mean": round(statistics.mean(lat) * 1000, 3)},
            "connection_flood": flood,
        }
        if a.json:
            print(json.dumps(report, indent=2))
            return
        print(f"world {path.name}: cap {cap} sessions ({free_cap} free-form), held {held} in {fill_s:.1f} s")
        print(f"past the cap: /mcp initialize {over_free.status_code} (Retry-After "
              f"{over_free.headers.get('retry-after')}), new episode {over_ctl.status_code} "
              f"(Retry-After {over_ctl.headers.get('retry-after')})")
        print(f"at the cap: /healthz p50 {pct(health_ms, 0.5)} ms p99 {pct(health_ms, 0.99)} ms; "
              f"GET /control/tasks p50 {pct(tasks_ms, 0.5)} ms p99 {pct(tasks_ms, 0.99)} ms")
        print(f"server memory: RSS {rss0:.0f} -> {rss1:.0f} MiB ({report['rss_kib_per_session']} KiB a session), "
              f"address space {vm0:.0f} -> {vm1:.0f} MiB ({report['vmsize_kib_per_session']} KiB a session)")
        print(f"at 90% of the cap ({at90} sessions): tools/call p50 {pct(lat, 0.5)} ms, p99 {pct(lat, 0.99)} ms "
              f"({CALLS} calls); a new session's initialize + first call {first_ms} ms")
        if flood:
            print(f"{flood['opened']} idle connections opened in {flood['open_seconds']} s; /healthz during: "
                  f"{flood['healthz_during']}; answering 200 again {flood['recovered_after_seconds']} s after")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()

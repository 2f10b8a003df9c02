"""MCP round trips with the official client: in-memory, stdio and streamable HTTP.

Each lists the tools and calls a read and a write tool; the results must equal the same calls
made in process on a fresh episode.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import PYTHON
from worldfactory.runtime.mcp_server import build_server
from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"


def _calls(world: World) -> list[tuple[str, dict[str, Any]]]:
    read = next(t for t in world.tool_manifest if t["kind"] == "search" and t["table"] == "claims")
    write = next(t for t in world.tool_manifest if t["kind"] == "transition" and t["examples"]["valid"])
    return [(read["name"], read["examples"]["valid"]), (write["name"], write["examples"]["valid"]),
            (write["name"], write["examples"]["valid"])]  # the repeat must fail: wrong state now


def _in_process(world: World) -> list[tuple[bool, Any]]:
    with world.episode() as ep:
        out = []
        for name, args in _calls(world):
            r = ep.call(name, args)
            out.append((r.ok, r.result if r.ok else None))
        return out


async def _over(client_target: Any, world: World) -> list[tuple[bool, Any]]:
    async with Client(client_target) as client:
        tools = (await client.list_tools()).tools
        assert sorted(t.name for t in tools) == sorted(world.tools_by_name)
        assert not {"verify", "reset"} & {t.name for t in tools}
        sample = next(t for t in tools if t.name == "approve_claim")
        assert sample.annotations is not None and sample.annotations.read_only_hint is False
        assert set(sample.input_schema["properties"]) == {"claim_id", "approved_amount"}
        out = []
        for name, args in _calls(world):
            r = await client.call_tool(name, args)
            out.append((not r.is_error, r.structured_content if not r.is_error else None))
        return out


def test_in_memory(worlds: dict[str, World]) -> None:
    world = worlds[WORLD]
    got = anyio.run(_over, build_server(world), world)
    assert got == _in_process(world)
    assert got[0][0] and got[1][0] and not got[2][0]


def test_stdio(worlds_dir: Path, worlds: dict[str, World]) -> None:
    world = worlds[WORLD]
    params = StdioServerParameters(command=PYTHON, args=["-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD)],
                                   env={"PATH": os.environ.get("PATH", "")})
    got = anyio.run(_over, params, world)
    assert got == _in_process(world)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_streamable_http(worlds_dir: Path, worlds: dict[str, World]) -> None:
    world = worlds[WORLD]
    port = _free_port()
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD), "--transport", "http",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.2)
        got = anyio.run(_over, f"http://127.0.0.1:{port}/mcp", world)
        assert got == _in_process(world)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

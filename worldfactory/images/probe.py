"""Run a world's image and check it from the host, as a user of the image would.

The probe starts the container with the port published on loopback (no capabilities, read-only
root, one small tmpfs as TMPDIR), then checks, in order: the bundle inside the image is byte for byte the
published bundle on the host; the server answers an MCP `initialize` (the time from start to
that answer is reported); an MCP client lists the tools, and they are the bundle's tools; one
task's oracle plan, run through the container's MCP endpoint, passes the world's verifier through
the control plane. Any failure gives a reason naming the step, with the container's log tail.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import secrets
import socket
import tarfile
import time
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx2
from docker.errors import APIError, NotFound
from pydantic import BaseModel

from worldfactory.images.engine import ImageError, connect
from worldfactory.images.world import BUNDLE_DIR, PORT, read_published
from worldfactory.runtime.control import ENV_TOKEN

# The only writable place in the probed container. Not /tmp: the project may live under /tmp (it sits at
# its host path), and a tmpfs there would hide it (or, with runc's copy-up, overflow copying it).
SCRATCH = "/run/worldfactory-scratch"


class ProbeReport(BaseModel):
    image: str
    world_id: str
    passed: bool
    reason: str = ""
    step: str = ""  # the step that failed: bundle, start, tools, oracle
    bundle_identical: bool = False
    differing_files: list[str] = []
    first_answer_seconds: float | None = None  # container start to the first MCP answer
    tools: int = 0
    task_id: str = ""
    reward: float | None = None
    stop_seconds: float | None = None  # `stop` (SIGTERM) to exit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def image_files(container: Any, folder: str = BUNDLE_DIR) -> dict[str, bytes]:
    """The regular files directly in `folder` of a (created) container, by name."""
    stream, _ = container.get_archive(folder)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        out = {}
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 2:
                f = tar.extractfile(member)
                out[parts[1]] = f.read() if f is not None else b""
        return out


def pick_task(files: dict[str, bytes]) -> dict[str, Any]:
    """The probe's task: the first curated task (sorted by ID), else the first task; its oracle and answer."""
    tasks = [json.loads(line) for line in files["tasks.jsonl"].decode().splitlines() if line.strip()]
    curated = sorted(json.loads(line)["task_id"] for line in files.get("curated_tasks.jsonl", b"").decode()
                     .splitlines() if line.strip())
    by_id = {t["task_id"]: t for t in tasks}
    chosen = next((by_id[t] for t in curated if t in by_id), None) or (sorted(tasks, key=lambda t: t["task_id"])
                                                                       or [None])[0]
    if chosen is None:
        raise ImageError("the bundle has no tasks to run an oracle for")
    return chosen


def _initialize(url: str, token: str) -> bool:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "worldfactory-probe", "version": "1"}}}
    try:  # off loopback (0.0.0.0 in the container) /mcp needs the control token too
        r = httpx2.post(url, json=body, headers={"accept": "application/json, text/event-stream",
                                                 "authorization": f"Bearer {token}"}, timeout=2)
    except httpx2.HTTPError:
        return False
    return r.status_code == 200 and "result" in r.json()


async def list_tools(url: str, token: str | None = None) -> list[str]:
    """The tool names an MCP server at `url` lists, through the MCP client over streamable HTTP (off loopback,
    a world server asks for its token on /mcp as on the control plane)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        return sorted(t.name for t in (await client.list_tools()).tools)


def _logs(container: Any) -> str:
    with contextlib.suppress(APIError, NotFound):
        return container.logs(tail=20).decode(errors="replace").strip()
    return ""


def probe_image(image: str, bundle: Path, client: docker.DockerClient | None = None, timeout: float = 60.0,
                task_id: str | None = None) -> ProbeReport:
    """Start `image`, check it against the published `bundle` (see the module doc), stop and remove it."""
    from worldfactory.env import WorldEnv

    published = read_published(bundle)
    world_id = json.loads(published["world.json"])["world_id"]
    client = client or connect()
    report = ProbeReport(image=image, world_id=world_id, passed=False)
    token = secrets.token_urlsafe(24)
    port = free_port()
    try:
        container = client.containers.create(
            image, detach=True, ports={f"{PORT}/tcp": ("127.0.0.1", port)},
            environment={ENV_TOKEN: token, "TMPDIR": SCRATCH}, cap_drop=["ALL"], security_opt=["no-new-privileges"],
            read_only=True, tmpfs={SCRATCH: "rw,size=64m,mode=1777"},
            labels={"org.worldfactory.probe": world_id})
    except (APIError, NotFound) as exc:
        raise ImageError(f"starting {image}: {exc}") from None
    try:
        inside = image_files(container)
        report.differing_files = sorted(n for n in set(inside) | set(published)
                                        if inside.get(n) is None or published.get(n) is None
                                        or hashlib.sha256(inside[n]).digest() != hashlib.sha256(published[n]).digest())
        report.bundle_identical = not report.differing_files
        if not report.bundle_identical:
            report.step = "bundle"
            report.reason = (f"the bundle in {image} differs from the published bundle {bundle}: "
                             f"{', '.join(report.differing_files)}")
            return report
        started = time.perf_counter()
        container.start()
        url = f"http://127.0.0.1:{port}"
        while not _initialize(f"{url}/mcp", token):
            container.reload()
            if container.status not in ("created", "running"):
                report.step, report.reason = "start", f"the container exited ({container.status}): {_logs(container)}"
                return report
            if time.perf_counter() - started > timeout:
                report.step = "start"
                report.reason = f"no MCP answer at {url}/mcp within {timeout:g} s: {_logs(container)}"
                return report
            time.sleep(0.1)
        report.first_answer_seconds = round(time.perf_counter() - started, 3)
        tools = anyio.run(list_tools, f"{url}/mcp", token)
        expected = sorted(t["name"] for t in json.loads(published["tools.json"]))
        report.tools = len(tools)
        if tools != expected:
            report.step = "tools"
            missing, extra = sorted(set(expected) - set(tools))[:5], sorted(set(tools) - set(expected))[:5]
            report.reason = (f"the container lists {len(tools)} tools, the bundle has {len(expected)}: "
                             f"missing {missing}, extra {extra}")
            return report
        task = pick_task(published) if task_id is None else next(
            json.loads(line) for line in published["tasks.jsonl"].decode().splitlines()
            if line.strip() and json.loads(line)["task_id"] == task_id)
        report.task_id = task["task_id"]
        with WorldEnv(url=url, token=token) as env:
            env.reset(task_id=task["task_id"])
            for call in task["oracle"]:
                out = env.step({"name": call["tool"], "arguments": call["args"]})
                if not out["ok"]:
                    report.step = "oracle"
                    report.reason = (f"{task['task_id']}: oracle call {call['tool']} failed in the container: "
                                     f"{out['error']}")
                    return report
            report.reward = env.verify(task.get("answer"))
        if report.reward != 1.0:
            report.step = "oracle"
            report.reason = f"{task['task_id']}: the oracle's reward in the container is {report.reward}, not 1.0"
            return report
        report.passed = True
        return report
    finally:
        stop_started = time.perf_counter()
        with contextlib.suppress(APIError, NotFound):
            container.stop(timeout=10)
            report.stop_seconds = round(time.perf_counter() - stop_started, 3)
        with contextlib.suppress(APIError, NotFound):
            container.remove(force=True)

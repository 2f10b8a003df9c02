"""The docs' `podman run` line (docs/images.md), exactly as written there, in a clean environment (`make
test-images`).

The command is read out of docs/images.md (never retyped here), the example image's real tag takes the place
of its `<tag>`, and it runs with an environment that has no CONTAINERS_CONF: what a new shell has. The
container must answer /healthz as the page's world, and list the bundle's tools over MCP from the host.
A second run adds low limits (1,024 open files and processes): the image needs no raised rlimit.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import anyio
import docker
import httpx2
import pytest

from tests.conftest import ROOT
from worldfactory.images.engine import connect
from worldfactory.images.probe import list_tools
from worldfactory.images.world import WORLD_REPO, build_world_image
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

PLACEHOLDER = "<tag>"
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
             "HOME": os.environ.get("HOME", "/root")}  # a new shell's: no CONTAINERS_CONF, no DOCKER_HOST


def readme_command(engine: str = "podman", readme: Path = ROOT / "docs" / "images.md") -> list[str]:
    """The argv of the page's first `<engine> run` line in a ```bash block: continuation lines joined,
    the trailing comment dropped."""
    for block in re.findall(r"```bash\n(.*?)```", readme.read_text(), flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            if line.startswith(f"{engine} run "):
                return shlex.split(line, comments=True)
    raise AssertionError(f"{readme.relative_to(ROOT)} has no `{engine} run` line in a bash block")


def token(argv: list[str]) -> str | None:
    """The control token the command gives the container (`-e WORLDFACTORY_CONTROL_TOKEN=...`): off loopback,
    as in a container, /mcp asks for it too."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "-e" and argv[i + 1].startswith("WORLDFACTORY_CONTROL_TOKEN="):
            return argv[i + 1].split("=", 1)[1]
    return None


def host_port(argv: list[str]) -> int:
    """The loopback port the command publishes (`-p 127.0.0.1:P:8000`)."""
    published = argv[argv.index("-p") + 1]
    return int(published.split(":")[-2])


@pytest.fixture(scope="module")
def command(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str, Path]:
    """The page's argv with the real tag of its example world's image (built here if `make images` did not),
    the image reference and the bundle."""
    argv = readme_command()
    [placeholder] = [a for a in argv if a.endswith(f":{PLACEHOLDER}")]
    world_id = placeholder.removeprefix(f"{WORLD_REPO}/").removesuffix(f":{PLACEHOLDER}")
    bundle = ROOT / "data" / "worlds" / world_id  # `make images` built the examples here
    if not (bundle / "world.json").is_file():
        root = tmp_path_factory.mktemp("readme-data")
        build_world(world_id, root, templates=load_templates())
        bundle = root / "worlds" / world_id
    image = build_world_image(bundle, connect()).image
    assert image.startswith(placeholder.removesuffix(PLACEHOLDER))
    return [image if a == placeholder else a for a in argv], image, bundle


def _run(argv: list[str], image: str, bundle: Path, log: Path) -> None:
    """Run `argv` as a new shell would, wait for /healthz, list the tools over MCP, stop it with SIGTERM."""
    port = host_port(argv)
    with socket.socket() as s:  # another server there would answer for the container
        if s.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"port {port}, which the documented command publishes, is already in use on this host")
    client: docker.DockerClient = connect()
    before = {c.id for c in client.containers.list(all=True, filters={"ancestor": image})}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=CLEAN_ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        manifest = json.loads((bundle / "world.json").read_text())
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"`{shlex.join(argv)}` exited {proc.returncode}:\n{log.read_text()}"
            try:
                health = httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                if health.status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline, f"no /healthz within 90 s:\n{log.read_text()}"
            time.sleep(0.2)
        assert health.json()["world_id"] == manifest["world_id"]
        tools = anyio.run(list_tools, f"http://127.0.0.1:{port}/mcp", token(argv))
        assert tools == sorted(t["name"] for t in json.loads((bundle / "tools.json").read_text()))
        proc.send_signal(signal.SIGTERM)  # podman passes it on; uvicorn stops; --rm removes the container
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for container in client.containers.list(all=True, filters={"ancestor": image}):
            if container.id not in before:
                container.remove(force=True)


def test_the_readmes_podman_run_line_serves_the_world(command: tuple[list[str], str, Path], tmp_path: Path) -> None:
    argv, image, bundle = command
    assert argv[:2] == ["podman", "run"] and image in argv and "CONTAINERS_CONF" not in CLEAN_ENV
    _run(argv, image, bundle, tmp_path / "podman-run.log")


def test_the_image_needs_no_raised_rlimit(command: tuple[list[str], str, Path], tmp_path: Path) -> None:
    argv, image, bundle = command
    low = [*argv[:2], "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", *argv[2:]]  # far below the host's
    _run(low, image, bundle, tmp_path / "podman-run-low.log")


def test_the_readme_documents_the_same_line_for_docker() -> None:
    podman, docker_line = readme_command("podman"), readme_command("docker")
    assert docker_line[0] == "docker" and docker_line[1:] == podman[1:]

"""The container engine: a Docker API socket found through DOCKER_HOST, or the one `make images` starts.

Podman serves the Docker API (`podman system service`), so the `docker` SDK drives either engine.
When nothing answers, the error names what was tried and the command that sets one up.
"""

from __future__ import annotations

import os
from pathlib import Path

import docker
from docker.errors import DockerException

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROJECT_SOCKET = PROJECT_ROOT / ".engine" / "podman.sock"  # containers/engine.sh starts podman here
HINT = ("run `make images` (it installs podman, starts its Docker API socket and builds the example worlds' "
        f"images), then `export DOCKER_HOST=unix://{PROJECT_SOCKET}`; or point DOCKER_HOST at a running Docker")


class ImageError(Exception):
    """A world image could not be built, or its container did not do what the image promises."""


class EngineError(ImageError):
    """No container engine answers."""


def engine_url() -> str:
    """DOCKER_HOST if set; else the project's podman socket if it exists; else Docker's default socket."""
    url = os.environ.get("DOCKER_HOST", "").strip()
    if url:
        return url
    if PROJECT_SOCKET.exists():
        return f"unix://{PROJECT_SOCKET}"
    return "unix:///var/run/docker.sock"


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client whose engine answered a ping; EngineError with the way out otherwise."""
    url = engine_url()
    try:
        client = docker.DockerClient(base_url=url, timeout=timeout)
        client.ping()
    except (DockerException, OSError) as exc:
        where = "DOCKER_HOST" if os.environ.get("DOCKER_HOST", "").strip() else "the default socket"
        raise EngineError(f"no container engine answers at {url} ({where}): {exc.__class__.__name__}; {HINT}") from None
    return client

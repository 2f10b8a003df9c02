"""OpenEnv's container provider on this project's engine, for world images built with `--openenv`.

    from worldfactory.adapters.openenv_server import WorldEnvClient
    from worldfactory.images.openenv import EngineProvider
    env = await WorldEnvClient.from_docker_image(image, provider=EngineProvider())

OpenEnv's own LocalDockerProvider runs the `docker` command; this one talks to the same Docker API
socket as `worldfactory image` (Docker, or podman's service: worldfactory.images.engine), maps the
image's port 8000 to a free port on loopback, waits for OpenEnv's /health, and stops and removes
the container when OpenEnv's client closes. The container runs as the image says (non-root, the
world's tools unconfined inside it), with every capability dropped.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx2
from docker.errors import APIError, NotFound
from openenv.core.containers.runtime.providers import ContainerProvider

from worldfactory.images.engine import ImageError, connect
from worldfactory.images.probe import free_port
from worldfactory.images.world import PORT


class EngineProvider(ContainerProvider):
    """One container of a world image with OpenEnv's app (`worldfactory image --openenv`)."""

    def __init__(self, client: Any = None) -> None:
        self.client = client or connect()
        self.container: Any = None
        self.base_url: str | None = None  # the running container's, for requests beside OpenEnv's client

    def start_container(self, image: str, port: int | None = None, env_vars: dict[str, str] | None = None,
                        **kwargs: Any) -> str:
        port = port or free_port()
        try:
            self.container = self.client.containers.run(
                image, detach=True, ports={f"{PORT}/tcp": ("127.0.0.1", port)}, environment=env_vars or {},
                cap_drop=["ALL"], security_opt=["no-new-privileges"], labels={"org.worldfactory.openenv": image})
        except (APIError, NotFound) as exc:
            raise ImageError(f"starting {image}: {exc}") from None
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    def wait_for_ready(self, base_url: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{base_url}/health", timeout=2).status_code == 200:
                    return
            if self.container is not None:
                self.container.reload()
                if self.container.status not in ("created", "running"):
                    logs = self.container.logs(tail=40).decode(errors="replace")
                    raise ImageError(f"the container exited ({self.container.status}): {logs}")
            time.sleep(0.2)
        raise TimeoutError(f"no answer at {base_url}/health within {timeout_s:g} s")

    def stop_container(self) -> None:
        if self.container is None:
            return
        with contextlib.suppress(APIError, NotFound):
            self.container.stop(timeout=10)
        with contextlib.suppress(APIError, NotFound):
            self.container.remove(force=True)
        self.container = self.base_url = None

"""Worlds as OCI images, built and run through a Docker API socket (Docker or podman).

- engine.py: finds the engine (DOCKER_HOST, else the project's `.engine/podman.sock`) and says
  plainly how to get one when none answers;
- runtime.py: the shared runtime image (base + Python + the project installed at the path it has
  on the building host, so the same image is also the Dagster code image);
- world.py: a world's image, one small layer holding exactly the published bundle, with labels;
- probe.py: runs a world's container and checks it from the host over MCP (tools, one oracle).

Nothing here imports Dagster: the `world_image` asset wraps these functions.
"""

from worldfactory.images.engine import EngineError, ImageError, connect

__all__ = ["EngineError", "ImageError", "connect"]

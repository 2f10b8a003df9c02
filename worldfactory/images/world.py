"""A world's image: the shared runtime image plus one layer holding exactly the published bundle.

The bundle is read and checked against its world.json first (a changed file is refused, by name),
and those bytes are the layer: nothing is generated at build time, so the layer's files are the
world's published files whatever the engine's image ID. The image runs as the non-root user
`world`, carries labels naming the world, its generation seed, the generator version and every
file's sha256, has a health check on /healthz, and by default serves the world's MCP over
streamable HTTP on port 8000 (`-p 127.0.0.1:P:8000`, then MCP at http://127.0.0.1:P/mcp).

Inside the container the world's tool code runs without bubblewrap (`--unconfined`): the container
is its sandbox (an unprivileged user; the probe also drops every capability and mounts the root
file system read-only), and bubblewrap cannot make namespaces under a container's seccomp policy.
uvicorn handles SIGTERM itself, so `stop` ends the server promptly even as PID 1.

The OpenEnv target (`openenv=True`, `worldfactory image --openenv`) is the same bundle layer on a
runtime with the `openenv` extra, serving OpenEnv's app beside MCP on the same port (`serve --openenv`):
OpenEnv's `from_docker_image` starts it and talks to /ws, /reset, /step and /health on port 8000
(EngineProvider, worldfactory.images.openenv, does so through this project's engine). Its tag ends in
`-openenv`, so both images of a world can live side by side.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import docker
from pydantic import BaseModel

from worldfactory import GENERATOR_VERSION
from worldfactory.images.build import Log, build_image, find_image
from worldfactory.images.engine import ImageError, connect
from worldfactory.images.runtime import USER_ID, ensure_runtime
from worldfactory.runtime.world import WorldError, read_bundle

WORLD_REPO = "localhost/worldfactory"
RUNTIME_ENV = "WORLDFACTORY_RUNTIME_IMAGE"  # pins the runtime image worlds are built on
BUNDLE_DIR = "/srv/world"
PORT = 8000
LABEL = "org.worldfactory."
HEALTH_CMD = ["python", "-c", f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/healthz', "
              "timeout=2).read()"]
SERVE_CMD = ["worldfactory", "serve", BUNDLE_DIR, "--transport", "http", "--host", "0.0.0.0", "--port", str(PORT),
             "--unconfined"]
OPENENV = "openenv"  # the image target with OpenEnv's app: its runtime extra, serve flag and tag suffix

DOCKERFILE = """\
FROM {runtime}
COPY world/ {bundle}/
USER {uid}:{uid}
ENV HOME=/home/world WORLDFACTORY_UNCONFINED=1 WORLDFACTORY_ALLOWED_HOSTS=localhost,127.0.0.1
WORKDIR /home/world
EXPOSE {port}
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 CMD {health}
CMD {cmd}
LABEL {labels}
"""


class WorldImage(BaseModel):
    """What `worldfactory image` reports: the reference, and what it holds."""

    world_id: str
    image: str
    image_id: str
    runtime: str
    bundle_sha256: str  # sha256 of the bundle's world.json (which lists every other file's sha256)
    built: bool  # False: an image of this bundle on this runtime was already there
    seconds: float
    layer_bytes: int  # the bundle layer (image size minus runtime size)
    image_bytes: int
    labels: dict[str, str]


def image_name(world_id: str) -> str:
    """An image repository for a world ID (lowercase; characters outside [a-z0-9._-] become '-')."""
    name = re.sub(r"[^a-z0-9._-]", "-", world_id.lower()).strip("._-")
    if not name:
        raise ImageError(f"world ID {world_id!r} gives no usable image name")
    return f"{WORLD_REPO}/{name}"


def bundle_labels(files: dict[str, bytes], runtime: str, openenv: bool = False) -> dict[str, str]:
    """The labels of a world's image, from its world.json."""
    manifest = json.loads(files["world.json"])
    labels = {
        f"{LABEL}world-id": str(manifest["world_id"]),
        f"{LABEL}generation-seed": str(manifest.get("generation_seed", "")),
        f"{LABEL}generator-version": str(manifest.get("generator_version", GENERATOR_VERSION)),
        f"{LABEL}seed-type": str(manifest.get("seed_type", "")),
        f"{LABEL}inputs-fingerprint": str(manifest.get("inputs_fingerprint", "")),
        f"{LABEL}bundle-sha256": hashlib.sha256(files["world.json"]).hexdigest(),
        f"{LABEL}runtime": runtime,
        f"{LABEL}role": "world-openenv" if openenv else "world",
        f"{LABEL}serves": "mcp,openenv" if openenv else "mcp",
        "org.opencontainers.image.title": f"WorldFactory world {manifest['world_id']}",
        "org.opencontainers.image.version": str(manifest.get("generator_version", GENERATOR_VERSION)),
    }
    for name, sha in sorted(manifest.get("files", {}).items()):
        labels[f"{LABEL}sha256.{name}"] = str(sha)
    return labels


def world_context(files: dict[str, bytes], labels: dict[str, str], runtime: str,
                  openenv: bool = False) -> dict[str, bytes]:
    """The bundle under world/ and a Dockerfile whose one LABEL step carries every label."""
    ctx = {f"world/{name}": data for name, data in files.items()}
    cmd = [*SERVE_CMD, "--openenv"] if openenv else SERVE_CMD
    label_text = " \\\n      ".join(f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items()))
    ctx["Dockerfile"] = DOCKERFILE.format(runtime=runtime, bundle=BUNDLE_DIR, uid=USER_ID, port=PORT,
                                          health=json.dumps(HEALTH_CMD), cmd=json.dumps(cmd),
                                          labels=label_text).encode()
    return ctx


def read_published(bundle: Path) -> dict[str, bytes]:
    """The bundle's files, verified against world.json (ImageError naming the file otherwise)."""
    try:
        files = read_bundle(bundle, verify=True)
        json.loads(files["world.json"])["world_id"]
    except WorldError as exc:
        raise ImageError(str(exc)) from None
    except (KeyError, ValueError):
        raise ImageError(f"{bundle / 'world.json'}: no world_id; rebuild the world") from None
    return files


def build_world_image(bundle: Path, client: docker.DockerClient | None = None, log: Log | None = None,
                      force: bool = False, runtime: str | None = None, openenv: bool = False) -> WorldImage:
    """The image of a published bundle: reused when this bundle already has one on the same runtime.

    `runtime` names a runtime image to build on; by default $WORLDFACTORY_RUNTIME_IMAGE (not for the
    OpenEnv target, whose runtime needs the `openenv` extra), else the one for the project as it is
    now (worldfactory.images.runtime), built first if missing. `openenv`: the OpenEnv target.
    """
    started = time.perf_counter()
    files = read_published(bundle)
    client = client or connect()
    runtime = runtime or (None if openenv else os.environ.get(RUNTIME_ENV, "").strip() or None)
    if runtime is None:
        runtime, _ = ensure_runtime(client, log=log, extras=(OPENENV,) if openenv else ())
    elif find_image(client, runtime) is None:
        raise ImageError(f"the runtime image {runtime} is not in the engine")
    labels = bundle_labels(files, runtime, openenv)
    world_id = labels[f"{LABEL}world-id"]
    ref = f"{image_name(world_id)}:{labels[f'{LABEL}bundle-sha256'][:12]}" + (f"-{OPENENV}" if openenv else "")
    image = find_image(client, ref)
    built = force or image is None or (image.labels or {}).get(f"{LABEL}runtime") != runtime
    if built:
        image = build_image(client, world_context(files, labels, runtime, openenv), ref,
                            what=f"the image of {world_id}", log=log)
    assert image is not None
    runtime_image = find_image(client, runtime)
    size = int(image.attrs.get("Size") or 0)
    base = int(runtime_image.attrs.get("Size") or 0) if runtime_image is not None else 0
    return WorldImage(world_id=world_id, image=ref, image_id=image.id or "", runtime=runtime,
                      bundle_sha256=labels[f"{LABEL}bundle-sha256"], built=built,
                      seconds=round(time.perf_counter() - started, 3), layer_bytes=max(0, size - base),
                      image_bytes=size, labels=dict(image.labels or {}))

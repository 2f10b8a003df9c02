"""The shared runtime image: Debian base, Python 3.11, the project's dependencies and the project itself.

Layers, from the bottom: the base image (`make images` makes it with debootstrap: no registry is
needed), Python, Graphviz (the bundle stage draws the world page's ER diagram) and a non-root user
`world` (apt), a virtual environment with the project's
dependencies at exactly the versions of the building host's environment (pip; the host's CA bundle
is used in a builder stage only, so it never reaches the image), then the project's source.

The project sits at the path it has on the building host (`PROJECT_ROOT`, with its `.venv`), so
this image is also the Dagster code image: a run launched in a container finds the code where the
host's code location said it was. The tag is the sha256 of the build context, so an unchanged
project reuses the image, and a changed one rebuilds only the layers above the change.
"""

from __future__ import annotations

import os
import tomllib
from importlib import metadata
from pathlib import Path

import docker

from worldfactory.images.build import Log, build_image, find_image
from worldfactory.images.context import digest
from worldfactory.images.engine import PROJECT_ROOT

BASE_IMAGE = os.environ.get("WORLDFACTORY_BASE_IMAGE", "localhost/worldfactory-base:bookworm")
RUNTIME_REPO = "localhost/worldfactory-runtime"
USER_ID = 10001
SOURCES = ("pyproject.toml", "README.md", "workspace.yaml", "worldfactory", "pipelines", "assets", "resources",
           "world_templates")
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
NOT_PINNED = {"pip", "setuptools", "wheel", "worldfactory"}  # the build tools are chosen below, not by the host
CA_CANDIDATES = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")

DOCKERFILE = """\
FROM {base} AS system
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv graphviz >/dev/null \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \\
 && useradd --uid {uid} --user-group --create-home --shell /usr/sbin/nologin world

FROM system AS deps
COPY build/ /tmp/wf/
RUN python3 -m venv {root}/.venv \\
 && PIP_CERT=/tmp/wf/host-ca.crt {root}/.venv/bin/pip install -q --no-cache-dir --disable-pip-version-check \\
      -r /tmp/wf/requirements.txt -c /tmp/wf/constraints.txt "setuptools>=69"

FROM system
COPY --from=deps {root}/.venv {root}/.venv
COPY src/ {root}/
RUN {root}/.venv/bin/pip install -q --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation \\
      -e {root}
ENV PATH={root}/.venv/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR {root}
LABEL org.worldfactory.role=runtime
"""  # noqa: E501 (the apt line: a Dockerfile, not Python)


def _sources(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for name in SOURCES:
        path = root / name
        if path.is_file():
            files[f"src/{name}"] = path.read_bytes()
            continue
        for p in sorted(path.rglob("*")):
            rel = p.relative_to(root)
            if p.is_file() and not SKIP_PARTS & set(rel.parts) and not p.name.endswith((".pyc", ".egg-info")) \
                    and not any(part.startswith(".") for part in rel.parts):
                files[f"src/{rel.as_posix()}"] = p.read_bytes()
    return files


def requirements(root: Path) -> list[str]:
    """The project's own dependency list, from pyproject.toml."""
    with (root / "pyproject.toml").open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def constraints(root: Path = PROJECT_ROOT) -> list[str]:
    """name==version for the project's dependencies and theirs, as installed here: the image gets the
    versions tested here, and packages others add to this environment do not change it."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    todo = [Requirement(r) for r in requirements(root)]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in pins or name in NOT_PINNED:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: pip resolves it unpinned
        pins[name] = f"{name}=={dist.version}"
        for text in dist.requires or []:
            try:
                sub = Requirement(text)
            except InvalidRequirement:
                continue
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return [pins[k] for k in sorted(pins)]


def host_ca() -> bytes:
    """The CA bundle pip trusts on this host (package registries may sit behind an inspecting proxy)."""
    for var in CA_CANDIDATES:
        path = os.environ.get(var, "")
        if path and Path(path).is_file():
            return Path(path).read_bytes()
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default.read_bytes() if default.is_file() else b""


def runtime_context(root: Path = PROJECT_ROOT, base: str = BASE_IMAGE) -> dict[str, bytes]:
    files = _sources(root)
    files["Dockerfile"] = DOCKERFILE.format(base=base, root=root.as_posix(), uid=USER_ID).encode()
    files["build/requirements.txt"] = "\n".join(requirements(root)).encode() + b"\n"
    files["build/constraints.txt"] = "\n".join(constraints(root)).encode() + b"\n"
    files["build/host-ca.crt"] = host_ca()
    return files


def runtime_tag(files: dict[str, bytes]) -> str:
    """The image reference for a runtime context: the context's sha256 (without the CA bundle)."""
    return f"{RUNTIME_REPO}:{digest({k: v for k, v in files.items() if k != 'build/host-ca.crt'})[:16]}"


def ensure_runtime(client: docker.DockerClient, root: Path = PROJECT_ROOT, base: str = BASE_IMAGE,
                   log: Log | None = None) -> tuple[str, bool]:
    """The runtime image for the project as it is now: (reference, built now?). Built only if missing."""
    files = runtime_context(root, base)
    tag = runtime_tag(files)
    if find_image(client, tag) is not None:
        return tag, False
    build_image(client, files, tag, what="the runtime image", log=log, missing_base=base)
    return tag, True

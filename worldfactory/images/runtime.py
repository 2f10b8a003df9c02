"""The shared runtime image: Debian base, Python 3.11, the project's dependencies and the project itself.

Layers, from the bottom: the base image (`make images` makes it with debootstrap: no registry is
needed), Python, Graphviz (the bundle stage draws the world page's ER diagram) and a non-root user
`world` (apt), a virtual environment with the project's dependencies at exactly the versions of the
building host's environment (but the packaging tools: see NOT_PINNED), installed offline from wheels the
host's pip fetched (worldfactory.images.wheels; they reach no layer of the image), then the project's source.

The project sits at the path it has on the building host (`PROJECT_ROOT`, with its `.venv`), so
this image is also the Dagster code image: a run launched in a container finds the code where the
host's code location said it was. The tag is the sha256 of the build context, the wheels standing in
it for the pins that name them, so an unchanged project reuses the image without fetching anything,
and a changed one rebuilds only the layers above the change (a source change: the last layer).
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
from worldfactory.images.wheels import lock_key, wheel_files, wheelhouse

BASE_IMAGE = os.environ.get("WORLDFACTORY_BASE_IMAGE", "localhost/worldfactory-base:bookworm")
RUNTIME_REPO = "localhost/worldfactory-runtime"
USER_ID = 10001
SOURCES = ("pyproject.toml", "setup.py", "README.md", "workspace.yaml", "worldfactory", "pipelines", "assets",
           "resources", "world_templates", "worldfactory_verifiers")  # setup.py installs all of these (the Dagster
# folders as worldfactory_dagster.*, and the verifiers plugin package, which it names)
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
# Never pinned from the host: the project (installed from src/), and the packaging tools a venv is seeded with.
# Their versions here are whatever `python -m venv` bundled (a fresh 3.11 venv: setuptools 65.5.0), not versions
# the project chose or tested, and they contradict the build requirement (setuptools>=69): pip resolves them.
NOT_PINNED = {"pip", "setuptools", "wheel", "worldfactory"}
WHEELS = "build/wheels/"

SYSTEM = """\
FROM {base} AS system
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv graphviz >/dev/null \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \\
 && useradd --uid {uid} --user-group --create-home --shell /usr/sbin/nologin world
"""  # noqa: E501 (the apt line: a Dockerfile, not Python)
INSTALL = ("python3 -m venv {root}/.venv && {root}/.venv/bin/pip install -q --no-cache-dir --disable-pip-version-check "
           "--no-index --find-links /tmp/wf/wheels -r /tmp/wf/requirements.txt -c /tmp/wf/constraints.txt\n")
PROJECT = """\
COPY src/ {root}/
RUN {root}/.venv/bin/pip install -q --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation \\
      -e {root}
ENV PATH={root}/.venv/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR {root}
LABEL org.worldfactory.role=runtime
"""
# The wheels must not reach the image. Where the engine's builder can bind-mount from the context (podman),
# they are mounted into the one step that installs them: no layer holds them and no stage copies the
# environment (a first build here: 87 s against 152 s staged). Docker's build API as the docker SDK drives it
# is the classic builder, which refuses `RUN --mount`: there the wheels stay in a `deps` stage whose
# environment the image copies. WHEELS=<lock key> puts the pins into the mounted step's text, so a layer
# cache that looks only at a step's text still reinstalls when they change.
DOCKERFILE_MOUNTED = SYSTEM + "RUN --mount=type=bind,source=build,target=/tmp/wf WHEELS={lock} " + INSTALL + PROJECT
DOCKERFILE_STAGED = (SYSTEM + "\nFROM system AS deps\nCOPY build/ /tmp/wf/\nRUN " + INSTALL
                     + "\nFROM system\nCOPY --from=deps {root}/.venv {root}/.venv\n" + PROJECT)


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


def requirements(root: Path, extras: tuple[str, ...] = ()) -> list[str]:
    """What the image's venv holds: the project's dependencies, those of `extras` (e.g. "openenv", for the
    OpenEnv image target) and its build backend (pyproject.toml), the latter because the project is
    installed (editable, offline) in the image's last layer."""
    with (root / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)
    optional = project["project"].get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise ValueError(f"{root / 'pyproject.toml'}: no extra {unknown} in [project.optional-dependencies]")
    return [*project["project"]["dependencies"], *(r for e in extras for r in optional[e]),
            *project["build-system"]["requires"]]


def constraints(root: Path = PROJECT_ROOT, path: list[str] | None = None, extras: tuple[str, ...] = ()) -> list[str]:
    """name==version for the project's dependencies and theirs, as installed here (or in the environment whose
    import `path` is given): the image gets the versions tested here, and packages others add to this
    environment do not change it. The packaging tools are left to pip (see NOT_PINNED)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    installed: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(**({"path": path} if path is not None else {})):
        installed.setdefault(canonicalize_name(dist.metadata["Name"] or ""), dist)  # the first on the path wins
    pins: dict[str, str] = {}
    todo = [Requirement(r) for r in requirements(root, extras)]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in pins or name in NOT_PINNED:
            continue
        dist = installed.get(name)
        if dist is None:
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


def mounts_from_context(client: docker.DockerClient) -> bool:
    """Whether the engine's builder takes `RUN --mount=type=bind` from the context: podman's does."""
    components = client.version().get("Components") or []
    return any(str(c.get("Name", "")).startswith("Podman") for c in components)


def runtime_context(root: Path = PROJECT_ROOT, base: str = BASE_IMAGE, mounted: bool = True,
                    extras: tuple[str, ...] = ()) -> dict[str, bytes]:
    """The build context without its wheels (see `with_wheels`): sources, Dockerfile, requirements and pins.
    `mounted`: the Dockerfile that bind-mounts the wheels (podman), else the one with a builder stage.
    `extras`: optional dependency groups installed too (a different context, so a different tag)."""
    files = _sources(root)
    reqs, pins = requirements(root, extras), constraints(root, extras=extras)
    template = DOCKERFILE_MOUNTED if mounted else DOCKERFILE_STAGED
    files["Dockerfile"] = template.format(base=base, root=root.as_posix(), uid=USER_ID,
                                          lock=lock_key(reqs, pins)).encode()
    files["build/requirements.txt"] = "\n".join(reqs).encode() + b"\n"
    files["build/constraints.txt"] = "\n".join(pins).encode() + b"\n"
    return files


def with_wheels(files: dict[str, bytes]) -> dict[str, bytes]:
    """The context plus the wheelhouse its requirements and pins name (fetched by the host's pip if new)."""
    reqs, pins = (files[f"build/{name}.txt"].decode().splitlines() for name in ("requirements", "constraints"))
    folder = wheelhouse(reqs, pins)
    return {**files, **{WHEELS + name: data for name, data in wheel_files(folder).items()}}


def runtime_tag(files: dict[str, bytes]) -> str:
    """The image reference for a runtime context: the sha256 of the context less its wheels, which the pins
    in build/constraints.txt name (so an existing image is found without fetching them)."""
    return f"{RUNTIME_REPO}:{digest({k: v for k, v in files.items() if not k.startswith(WHEELS)})[:16]}"


def ensure_runtime(client: docker.DockerClient, root: Path = PROJECT_ROOT, base: str = BASE_IMAGE,
                   log: Log | None = None, extras: tuple[str, ...] = ()) -> tuple[str, bool]:
    """The runtime image for the project as it is now (with `extras`' dependencies): (reference, built now?).
    Built only if missing."""
    files = runtime_context(root, base, mounted=mounts_from_context(client), extras=extras)
    tag = runtime_tag(files)
    if find_image(client, tag) is not None:
        return tag, False
    build_image(client, with_wheels(files), tag, what="the runtime image", log=log, missing_base=base)
    return tag, True

"""Shared fixtures: the three example worlds, built once per test run into a temp folder that every
xdist worker reads, and a small template set for tests of the pipeline's mechanics."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = load_templates().catalog.examples
PYTHON = sys.executable


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def shared_build(tmp_path_factory: pytest.TempPathFactory, name: str, world_ids: list[str],
                 templates: Path | None = None) -> Iterator[Path]:
    """Worlds built once per test run, into a data folder every xdist worker reads; yields that folder.

    Under xdist the folder sits beside the workers' own temp folders, and each world is built by
    whichever worker takes its lock first, the workers starting at different worlds so that builds run
    side by side. Tests only read it: a test that changes a world works on its own copy. When a
    worker's session ends it checks that every file is as it was when the worlds were built, so a
    test that writes into the shared folder fails."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        root = tmp_path_factory.mktemp(name)
        order = list(world_ids)
    else:
        root = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
        turn = int(worker.removeprefix("gw")) % len(world_ids)
        order = [*world_ids[turn:], *world_ids[:turn]]
    root.mkdir(parents=True, exist_ok=True)
    ts = load_templates(templates) if templates is not None else None
    for wid in order:
        with (root.parent / f"{root.name}-{wid}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the worker dies
            done = root / f".built-{wid}"
            if not done.exists():
                build_world(wid, root, templates=ts)
                done.touch()
    before = _digests(root)
    yield root
    changed = sorted({name for name, _ in set(before.items()) ^ set(_digests(root).items())})
    assert not changed, f"a test wrote into the shared data folder {root}: {changed}"


@pytest.fixture(scope="session")
def worlds_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example worlds, built once per run (see shared_build): <data>/worlds."""
    for root in shared_build(tmp_path_factory, "data", EXAMPLES):
        yield root / "worlds"


@pytest.fixture(scope="session")
def worlds(worlds_dir: Path) -> dict[str, World]:
    return {wid: World.open(worlds_dir / wid) for wid in EXAMPLES}


def small_templates_at(dest: Path) -> Path:
    """tests/small_templates (two one-table domains at a third of the scale) with the project's shared
    modules and vocabulary: a world builds in about two seconds. For sensor, corruption, delete,
    parallel and end-to-end tests, where the pipeline's mechanics matter and not the world's size."""
    shutil.copytree(ROOT / "tests" / "small_templates", dest)
    shutil.copytree(ROOT / "world_templates" / "modules", dest / "modules")
    shutil.copy(ROOT / "world_templates" / "vocabulary.yaml", dest / "vocabulary.yaml")
    return dest


@pytest.fixture(scope="session")
def small_templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_templates_at(tmp_path_factory.mktemp("small") / "templates")


SMALL = ["help-desk.small--v001", "field-service.small--v001"]


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory, small_templates: Path) -> Iterator[Path]:
    """The two small worlds, built once per run (see shared_build): a data folder, worlds/ and catalog/."""
    yield from shared_build(tmp_path_factory, "small-data", SMALL, small_templates)


@pytest.fixture(params=EXAMPLES)
def world(request: pytest.FixtureRequest, worlds: dict[str, World]) -> World:
    return worlds[request.param]

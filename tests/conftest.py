"""Shared fixtures: the three example worlds, built once per test session into a temp folder, and a
small template set for tests of the pipeline's mechanics."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = load_templates().catalog.examples
PYTHON = sys.executable


@pytest.fixture(scope="session")
def worlds_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    for wid in EXAMPLES:
        build_world(wid, root)
    return root / "worlds"


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


@pytest.fixture(params=EXAMPLES)
def world(request: pytest.FixtureRequest, worlds: dict[str, World]) -> World:
    return worlds[request.param]

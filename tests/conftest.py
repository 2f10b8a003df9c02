"""Shared fixtures: the three example worlds, built once per test session into a temp folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from worldfactory.build.pipeline import build_world
from worldfactory.runtime.world import World
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


@pytest.fixture(params=EXAMPLES)
def world(request: pytest.FixtureRequest, worlds: dict[str, World]) -> World:
    return worlds[request.param]

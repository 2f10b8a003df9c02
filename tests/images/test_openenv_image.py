"""The OpenEnv image target on a real engine (`make test-images`): `worldfactory image --openenv` builds a world
image that serves OpenEnv's app beside MCP, and OpenEnv's own client starts it from the image
(`from_docker_image`, through EngineProvider) and plays an episode graded by the world's verifier."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import httpx2
import pytest

from tests.conftest import SMALL
from worldfactory.images.engine import connect
from worldfactory.images.probe import pick_task, probe_image
from worldfactory.images.world import LABEL, build_world_image, read_published
from worldfactory.runtime.control import ENV_TOKEN
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

WID = SMALL[0]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, small_templates: Path) -> Path:
    root = tmp_path_factory.mktemp("openenv-image-data")
    build_world(WID, root, templates=load_templates(str(small_templates)))
    return root / "worlds" / WID


def test_openenv_client_starts_the_world_image_and_plays_it(bundle: Path) -> None:
    from openenv.core.env_server.mcp_types import CallToolAction

    from worldfactory.adapters.openenv_server import SUBMIT, WorldEnvClient
    from worldfactory.images.openenv import EngineProvider

    client = connect()
    built = build_world_image(bundle, client=client, openenv=True)
    plain = build_world_image(bundle, client=client)
    assert built.image.endswith("-openenv") and built.image != plain.image
    assert built.labels[f"{LABEL}serves"] == "mcp,openenv" and plain.labels[f"{LABEL}serves"] == "mcp"
    assert probe_image(built.image, bundle, client=client).passed  # MCP and the bundle as in the plain image
    files = read_published(bundle)
    task = pick_task(files)
    provider = EngineProvider(client)

    async def play() -> tuple[float | None, dict]:
        env = await WorldEnvClient.from_docker_image(built.image, provider=provider,
                                                     env_vars={ENV_TOKEN: secrets.token_urlsafe(16)})
        try:
            meta = httpx2.get(f"{provider.base_url}/metadata").json()
            await env.reset(task_id=task["task_id"])
            for call in task["oracle"]:
                await env.call_tool(call["tool"], **call["args"])
            end = await env.step(CallToolAction(tool_name=SUBMIT, arguments={"answer": task.get("answer")}))
            return end.reward, meta
        finally:
            await env.close()

    reward, meta = asyncio.run(play())
    assert reward == 1.0
    assert meta["readme_content"] == files["README.md"].decode()
    assert meta["version"].startswith(json.loads(files["world.json"])["generator_version"] + "+")
    assert provider.container is None  # the client's close stopped and removed it

"""World images on a real container engine (`make test-images`, after `make images`; `make test` skips this folder).

Each test builds a real image through the Docker API, runs its container with the port on
loopback and talks MCP to it from here. Faults are planted in images and bundles: a bundle file
changed inside an image, and a bundle whose tool code cannot load (its container never answers).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import dagster as dg
import docker
import httpx2
import pytest

from tests.conftest import PYTHON, ROOT, SMALL
from worldfactory.images.build import build_image
from worldfactory.images.engine import connect
from worldfactory.images.probe import free_port, probe_image
from worldfactory.images.runtime import ensure_runtime
from worldfactory.images.world import HEALTH_CMD, LABEL, PORT, RUNTIME_ENV, build_world_image
from worldfactory.runtime.control import ENV_TOKEN
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates
from worldfactory_dagster.assets.image import CHECK, world_image
from worldfactory_dagster.resources.world_store import WorldStore

WID = SMALL[0]


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return connect()  # no engine: EngineError saying to run `make images` (the test fails, it is not skipped)


@pytest.fixture(scope="module")
def runtime(client: docker.DockerClient) -> str:
    """The runtime image, made once: others editing the tree would otherwise change it between builds."""
    return ensure_runtime(client)[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, small_templates: Path) -> Path:
    root = tmp_path_factory.mktemp("images-data")
    build_world(WID, root, templates=load_templates(str(small_templates)))
    return root


def _republish(bundle: Path, name: str, content: bytes) -> None:
    """Change one file of a bundle and record its new sha256 in world.json: a consistent bundle, bad content."""
    (bundle / name).write_bytes(content)
    manifest = json.loads((bundle / "world.json").read_text())
    manifest["files"][name] = hashlib.sha256(content).hexdigest()
    (bundle / "world.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))


def test_image_serves_the_published_bundle(client: docker.DockerClient, runtime: str, data: Path) -> None:
    bundle = data / "worlds" / WID
    manifest = json.loads((bundle / "world.json").read_text())
    built = build_world_image(bundle, client, runtime=runtime)
    labels = built.labels
    assert labels[f"{LABEL}world-id"] == WID
    assert labels[f"{LABEL}generation-seed"] == str(manifest["generation_seed"])
    assert labels[f"{LABEL}generator-version"] == manifest["generator_version"]
    assert labels[f"{LABEL}bundle-sha256"] == hashlib.sha256((bundle / "world.json").read_bytes()).hexdigest()
    assert {k.removeprefix(f"{LABEL}sha256."): v for k, v in labels.items()
            if k.startswith(f"{LABEL}sha256.")} == manifest["files"]
    image = client.images.get(built.image)
    assert image.attrs["Config"]["User"] == "10001:10001"
    assert 0 < built.layer_bytes < 2 * sum(p.stat().st_size for p in bundle.iterdir())  # the bundle, little else

    report = probe_image(built.image, bundle, client)
    assert report.passed, report.reason
    assert report.bundle_identical and report.differing_files == []
    assert report.tools == len(json.loads((bundle / "tools.json").read_text()))
    assert report.reward == 1.0 and report.task_id

    again = build_world_image(bundle, client, runtime=runtime)  # same bundle, same runtime: the image is reused
    assert not again.built and again.image_id == built.image_id

    cli = subprocess.run([PYTHON, "-m", "worldfactory.cli", "image", str(bundle), "--json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert cli.returncode == 0, cli.stderr
    out = json.loads(cli.stdout)
    assert out["image"] == built.image  # the tag names the bundle; the runtime is the tree's as it is now


def test_container_runs_unprivileged_with_a_health_check_and_stops_on_sigterm(client: docker.DockerClient,
                                                                             runtime: str, data: Path) -> None:
    built = build_world_image(data / "worlds" / WID, client, runtime=runtime)
    port = free_port()
    container = client.containers.run(built.image, detach=True, ports={f"{PORT}/tcp": ("127.0.0.1", port)},
                                      environment={ENV_TOKEN: "t0ken"})
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                health = httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                if health.status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline, container.logs().decode()
            time.sleep(0.2)
        assert health.json()["world_id"] == WID
        container.reload()
        assert container.attrs["Config"]["Healthcheck"]["Test"] == ["CMD", *HEALTH_CMD]
        assert container.exec_run(HEALTH_CMD).exit_code == 0
        assert container.exec_run(["id", "-u"]).output.decode().strip() == "10001"
        assert container.exec_run(["sh", "-c", "echo x >> /srv/world/tools.py"]).exit_code != 0  # not its files
        started = time.perf_counter()
        container.stop(timeout=20)
        assert time.perf_counter() - started < 15  # SIGTERM ends the server; no wait for the kill
    finally:
        container.remove(force=True)


def test_a_bundle_changed_inside_an_image_fails_the_probe(client: docker.DockerClient, runtime: str,
                                                         data: Path) -> None:
    bundle = data / "worlds" / WID
    good = build_world_image(bundle, client, runtime=runtime)
    tampered = "localhost/worldfactory-test/tampered:1"
    dockerfile = (f"FROM {good.image}\nUSER root\nRUN printf '\\n# changed\\n' >> /srv/world/tools.py\n"
                  "USER 10001:10001\n")
    build_image(client, {"Dockerfile": dockerfile.encode()}, tampered, what="a tampered image")
    try:
        report = probe_image(tampered, bundle, client)
        assert not report.passed and report.step == "bundle"
        assert report.differing_files == ["tools.py"]
        # the server in it refuses the changed bundle on its own, too: the container exits, naming the file
        container = client.containers.run(tampered, detach=True)
        try:
            assert container.wait(timeout=120)["StatusCode"] != 0
            assert "tools.py" in container.logs().decode()
        finally:
            container.remove(force=True)
    finally:
        client.images.remove(tampered, force=True)


def test_a_container_that_cannot_answer_fails_the_asset_check(client: docker.DockerClient, runtime: str, data: Path,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNTIME_ENV, runtime)
    store = WorldStore(root=str(data))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("world", [WID])
        ok = dg.materialize([world_image], partition_key=WID, instance=instance, resources={"world_store": store})
        assert ok.success
        [check] = ok.get_asset_check_evaluations()
        assert check.check_name == CHECK and check.passed
        [mat] = ok.asset_materializations_for_node("world_image")
        assert str(mat.metadata["image"].value).startswith("localhost/worldfactory/")

        # the fault: tool code that cannot import, republished with matching hashes, so the image builds
        broken_root = tmp_path / "data"
        (broken_root / "worlds").mkdir(parents=True)
        broken = broken_root / "worlds" / WID
        broken.mkdir()
        for p in (data / "worlds" / WID).iterdir():
            (broken / p.name).write_bytes(p.read_bytes())
        _republish(broken, "tools.py", b"import a_module_no_image_has\n" + (broken / "tools.py").read_bytes())
        bad = dg.materialize([world_image], partition_key=WID, instance=instance, raise_on_error=False,
                             resources={"world_store": WorldStore(root=str(broken_root))})
        assert not bad.success
        [check] = bad.get_asset_check_evaluations()
        assert not check.passed
        reason = str(check.metadata["reason"].value)
        assert "start: the container exited" in reason and "tools.py" in reason

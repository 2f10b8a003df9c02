"""World images without an engine: the clear error when none answers, refused bundles, deterministic contexts.

The tests that build and run real images are in tests/images/ (`make test-images`).
"""

from __future__ import annotations

import ensurepip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import PYTHON, ROOT, SMALL
from worldfactory.images import EngineError, ImageError, connect
from worldfactory.images.context import context_tar
from worldfactory.images.runtime import constraints, requirements, runtime_context, runtime_tag
from worldfactory.images.wheels import lock_key, wheelhouse
from worldfactory.images.world import LABEL, bundle_labels, image_name, read_published, world_context


@pytest.fixture(scope="module")
def bundle(small_data: Path) -> Path:
    return small_data / "worlds" / SMALL[0]


def test_no_engine_says_how_to_get_one(tmp_path: Path, bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = f"unix://{tmp_path}/no-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", missing)
    with pytest.raises(EngineError, match="make images") as err:
        connect()
    assert missing in str(err.value)
    cli = subprocess.run([PYTHON, "-m", "worldfactory.cli", "image", str(bundle)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": missing})
    assert cli.returncode == 2 and cli.stdout == ""
    assert "no container engine answers" in cli.stderr and "make images" in cli.stderr


def test_a_changed_bundle_is_refused_before_any_build(tmp_path: Path, bundle: Path) -> None:
    copy = tmp_path / SMALL[0]
    copy.mkdir()
    for p in bundle.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    (copy / "seed.db").write_bytes((copy / "seed.db").read_bytes() + b"\0")
    with pytest.raises(ImageError, match="seed.db: its sha256 differs"):
        read_published(copy)


def test_the_world_layer_is_the_published_bytes_and_contexts_are_deterministic(bundle: Path) -> None:
    files = read_published(bundle)
    labels = bundle_labels(files, "localhost/worldfactory-runtime:x")
    ctx = world_context(files, labels, "localhost/worldfactory-runtime:x")
    assert {k.removeprefix("world/"): v for k, v in ctx.items() if k.startswith("world/")} == files
    manifest = json.loads(files["world.json"])
    assert labels[f"{LABEL}world-id"] == manifest["world_id"] == SMALL[0]
    assert labels[f"{LABEL}bundle-sha256"] == hashlib.sha256(files["world.json"]).hexdigest()
    assert labels[f"{LABEL}sha256.seed.db"] == manifest["files"]["seed.db"]
    dockerfile = ctx["Dockerfile"].decode()
    assert "USER 10001:10001" in dockerfile and "HEALTHCHECK" in dockerfile and '"0.0.0.0"' in dockerfile
    # the same files in another order give the same archive, byte for byte
    assert context_tar(ctx) == context_tar(dict(reversed(list(ctx.items()))))
    with tarfile.open(fileobj=io.BytesIO(context_tar(ctx))) as tar:
        member = tar.getmember("world/seed.db")
        assert member.mtime == 0 and member.uid == 0 and tar.extractfile(member).read() == files["seed.db"]


def test_the_openenv_target_serves_openenv_on_a_runtime_with_its_extra(bundle: Path) -> None:
    files = read_published(bundle)
    plain = world_context(files, bundle_labels(files, "rt:x"), "rt:x")["Dockerfile"].decode()
    labels = bundle_labels(files, "rt:y", openenv=True)
    ctx = world_context(files, labels, "rt:y", openenv=True)
    cmd = json.loads(next(line for line in ctx["Dockerfile"].decode().splitlines() if line.startswith("CMD "))[4:])
    assert cmd[-1] == "--openenv" and "--openenv" not in plain and labels[f"{LABEL}serves"] == "mcp,openenv"
    assert {k: v for k, v in ctx.items() if k.startswith("world/")} == {f"world/{k}": v for k, v in files.items()}
    # the OpenEnv runtime installs the `openenv` extra (and so gets another tag); an unknown extra is named
    with_extra = requirements(ROOT, ("openenv",))
    assert any(r.startswith("openenv-core") for r in with_extra)
    assert not any(r.startswith("openenv-core") for r in requirements(ROOT))
    assert runtime_tag(runtime_context(extras=("openenv",))) != runtime_tag(runtime_context())
    with pytest.raises(ValueError, match="no extra \\['nosuch'\\]"):
        requirements(ROOT, ("nosuch",))


def test_image_names_follow_the_reference_grammar() -> None:
    assert image_name("insurance-claims.regional--v001") == "localhost/worldfactory/insurance-claims.regional--v001"
    assert image_name("Brief.My Shop--v002") == "localhost/worldfactory/brief.my-shop--v002"
    with pytest.raises(ImageError):
        image_name("...")


def _wheel(folder: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel of one module, written by hand (pip accepts it from --find-links)."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": b"X = 1\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{k},,\n" for k in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for k, v in {**files, f"{dist}/RECORD": record.encode()}.items():
            z.writestr(k, v)


def test_the_runtime_wheelhouse_is_fetched_once_per_set_of_pins(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, "wfdemo", "1.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: the host's pip sees only the folder below
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    cache = tmp_path / "cache"
    folder = wheelhouse(["wfdemo"], ["wfdemo==1.0"], cache)
    assert [p.name for p in folder.iterdir()] == ["wfdemo-1.0-py3-none-any.whl"]
    assert folder.name == lock_key(["wfdemo"], ["wfdemo==1.0"])
    shutil.rmtree(links)  # the same pins again: the wheelhouse is reused, pip is not asked
    assert wheelhouse(["wfdemo"], ["wfdemo==1.0"], cache) == folder
    with pytest.raises(ImageError, match="wfdemo"):  # pins pip cannot satisfy: refused, nothing half-made left
        wheelhouse(["wfdemo"], ["wfdemo==2.0"], cache)
    assert sorted(p.name for p in cache.iterdir()) == [folder.name]


def test_the_runtime_tag_follows_sources_and_pins_not_wheel_bytes() -> None:
    files = runtime_context()
    tag = runtime_tag(files)
    assert tag.startswith("localhost/worldfactory-runtime:")
    assert runtime_tag({**files, "build/wheels/x-1-py3-none-any.whl": b"any"}) == tag
    assert runtime_tag({**files, "src/worldfactory/__init__.py": files["src/worldfactory/__init__.py"] + b"\n"}) != tag
    pins = files["build/constraints.txt"].decode().splitlines()
    assert any(p.startswith("dagster==") for p in pins) and not any(p.startswith("setuptools==") for p in pins)
    assert runtime_tag({**files, "build/constraints.txt": "\n".join(pins[1:]).encode()}) != tag
    mounted = files["Dockerfile"].decode()  # podman: the wheels bind-mounted into the install step alone
    reqs = files["build/requirements.txt"].decode().splitlines()
    assert "--no-index --find-links /tmp/wf/wheels" in mounted and "host-ca" not in mounted
    assert "COPY build/" not in mounted and f"WHEELS={lock_key(reqs, pins)} " in mounted  # step text follows pins
    staged = runtime_context(mounted=False)["Dockerfile"].decode()  # Docker's classic builder has no --mount
    final = staged.rsplit("\nFROM ", 1)[1]  # the image's own stage: the environment, never the wheels
    # Neither the wheels nor their install reach that stage (checked by step text, not by the mount's path:
    # the project's own root, which the stage names, may itself live under /tmp/wf...).
    assert "--mount" not in staged and "COPY --from=deps" in final
    assert "COPY build/" not in final and "--find-links" not in final


def _seed_wheels() -> list[Path]:
    """The wheels `python -m venv` seeds a fresh venv with: ensurepip's (Debian's python takes them from
    /usr/share/python-wheels, which its ensurepip names by path)."""
    get = getattr(ensurepip, "_get_packages", None)  # Python 3.11
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    if get is None:
        return sorted(bundled.glob("*.whl"))
    return [Path(pkg.wheel_path) if pkg.wheel_path else bundled / pkg.wheel_name for pkg in get().values()]


def test_pins_from_a_fresh_venv_do_not_contradict_the_requirements(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh venv's site-packages as `make images` sees it (python3.11 -m venv, pip install -e .[dev], no
    # upgrade): the seed tools' metadata first on the path, this environment's packages after it.
    site = tmp_path / "site-packages"
    seeds = {}
    for wheel in _seed_wheels():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site, [n for n in z.namelist() if n.split("/")[0].endswith(".dist-info")])
        name, version = wheel.name.split("-")[:2]
        seeds[canonicalize_name(name)] = version
    if sys.version_info < (3, 12):  # 3.11 seeds setuptools 65.5.0 or 66.1.1: below the build requirement
        assert not Requirement(next(r for r in requirements(ROOT) if r.startswith("setuptools"))).specifier.contains(
            seeds["setuptools"])
    pins = constraints(ROOT, path=[str(site), *sys.path])
    pinned = dict(p.split("==") for p in pins)
    for text in requirements(ROOT):  # the project's requirements and its build backend's
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name not in pinned or req.specifier.contains(pinned[name], prereleases=True), (text, pinned[name])

    # The resolver agrees, offline: the build requirement against these pins, from a folder holding the seed's
    # setuptools and a newer one (what ResolutionImpossible broke `make images` on)
    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, "setuptools", seeds.get("setuptools", "65.5.0"))
    _wheel(links, "setuptools", "69.5.1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    build_reqs = [r for r in requirements(ROOT) if canonicalize_name(Requirement(r).name) == "setuptools"]
    folder = wheelhouse(build_reqs, pins, tmp_path / "cache")
    assert [p.name for p in folder.iterdir()] == ["setuptools-69.5.1-py3-none-any.whl"]
    assert pinned.get("dagster") and not {"pip", "setuptools", "wheel"} & set(pinned)  # the seed tools: pip's choice


def _bin_without_packages(where: Path, with_apt: bool) -> Path:
    """A PATH holding only what containers/engine.sh needs before its package check (and apt-get, if asked)."""
    folder = where / "bin"
    folder.mkdir()
    for tool in ("bash", "dirname", "id", *(["apt-get"] if with_apt else [])):
        (folder / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    return folder


@pytest.mark.parametrize("case", ["no apt-get", "not root"])
def test_engine_without_its_packages_stops_first_with_one_message(tmp_path: Path, case: str,
                                                                  request: pytest.FixtureRequest) -> None:
    shared = Path(tempfile.mkdtemp(prefix="wf-engine-"))  # not under pytest's root-only folder: nobody runs it
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    env = {"PATH": str(_bin_without_packages(shared, with_apt=case == "not root")),
           "WORLDFACTORY_ENGINE_DIR": str(tmp_path / "engine"), "WORLDFACTORY_IMAGE_CACHE": str(tmp_path / "cache"),
           "WORLDFACTORY_CONTAINERS_DROP_IN": str(tmp_path / "drop-in.conf")}
    for script in ("containers/engine.sh", "scripts/system-packages.sh"):  # a copy nobody can reach, wherever
        copy = shared / "repo" / script  # the checkout lives (a clone in `mktemp -d` is root-only)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / script, copy)
    (shared / "repo").chmod(0o755)
    argv = [str(shared / "repo" / "containers" / "engine.sh")]
    if case == "not root":
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) runs the script as nobody"
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == ""  # scripts/system-packages.sh's message, and nothing else
    assert "podman runc debootstrap curl" in done.stderr
    assert "apt-get install -y podman runc debootstrap curl" in done.stderr
    assert not (tmp_path / "engine").exists() and not (tmp_path / "cache").exists()  # no work done

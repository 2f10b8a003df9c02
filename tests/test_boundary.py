"""The OS boundary: which one is chosen, Landlock's own rules on a real process, a build under each
boundary (the same world, the boundary recorded), and `serve` under Landlock.

The planted escapes of generated code run under each boundary in tests/test_sandbox.py.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from tests.conftest import PYTHON, ROOT, SMALL
from worldfactory import boundary, landlock
from worldfactory.boundary import ConfinementError

HAS = {kind: boundary.why_not(kind) is None for kind in boundary.BOUNDARIES}
needs_landlock = pytest.mark.skipif(not HAS["landlock"], reason="this kernel has no Landlock")


def fake_bwrap(folder: Path) -> Path:
    """A `bwrap` that cannot start, as in a container without user namespaces."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bwrap"
    path.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    path.chmod(0o755)
    return folder


@needs_landlock
def test_choice_falls_back_and_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(boundary.ENV_BOUNDARY, raising=False)
    monkeypatch.setenv("PATH", f"{fake_bwrap(tmp_path / 'bin')}:{os.environ['PATH']}")
    assert "No permissions to create new namespace" in str(boundary.why_not("bubblewrap"))
    assert boundary.choose() == "landlock"  # bwrap is there but cannot start: Landlock, no privileges needed

    monkeypatch.setenv(boundary.ENV_BOUNDARY, "bubblewrap")  # forced, and it cannot start: a clear error
    with pytest.raises(ConfinementError, match=r"WORLDFACTORY_BOUNDARY=bubblewrap was asked for, but bwrap cannot "
                                               r"start here \(bwrap: No permissions"):
        boundary.choose()
    monkeypatch.setenv(boundary.ENV_BOUNDARY, "docker")
    with pytest.raises(ConfinementError, match=r"'docker': not a boundary; use one of bubblewrap, landlock"):
        boundary.choose()

    monkeypatch.delenv(boundary.ENV_BOUNDARY)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert boundary.why_not("bubblewrap") == "bubblewrap is not installed"
    assert boundary.choose() == "landlock"
    monkeypatch.setattr(landlock, "missing", lambda: "this kernel has no Landlock")  # an old kernel
    with pytest.raises(ConfinementError, match=r"none can start here \(bubblewrap: bubblewrap is not installed; "
                                               r"landlock: this kernel has no Landlock.*`bubblewrap`.*Landlock.*"
                                               r"--unconfined or WORLDFACTORY_UNCONFINED=1"):
        boundary.choose()


# A container without user namespaces (Docker's default seccomp policy does this): unshare(2) and clone(2)
# with CLONE_NEWUSER refused, clone3 "not implemented" (so that glibc falls back to clone); with "1" also
# Landlock's three system calls refused. The child then chooses a boundary and runs a job confined.
CONTAINER = """
import json, struct, sys, ctypes
sys.path.insert(0, sys.argv[1])
EPERM, ENOSYS, ALLOW = 0x00050001, 0x00050026, 0x7FFF0000
denied = [272] + ([444, 445, 446] if sys.argv[2] == "1" else [])
prog = [(0x20, 0, 0, 4), (0x15, 1, 0, 0xC000003E), (0x06, 0, 0, ALLOW), (0x20, 0, 0, 0)]
for nr in denied:
    prog += [(0x15, 0, 1, nr), (0x06, 0, 0, EPERM)]
prog += [(0x15, 0, 1, 435), (0x06, 0, 0, ENOSYS), (0x15, 0, 3, 56), (0x20, 0, 0, 16),
         (0x45, 0, 1, 0x10000000), (0x06, 0, 0, EPERM), (0x06, 0, 0, ALLOW)]
code = b"".join(struct.pack("HBBI", *op) for op in prog)
buf = ctypes.create_string_buffer(code)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
fprog = Fprog(len(prog), ctypes.addressof(buf))
assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0
from worldfactory import boundary, confine
out = {"bubblewrap": boundary.why_not("bubblewrap"), "landlock": boundary.why_not("landlock")}
try:
    out["chosen"] = boundary.choose()
    out["ping"] = confine.run_job("ping")
    out["worker"] = confine.worker().boundary
except confine.ConfinementError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.skipif(not HAS["landlock"] or platform.machine() != "x86_64", reason="needs Landlock on x86_64 Linux")
def test_a_container_without_user_namespaces_gets_landlock() -> None:
    def container(no_landlock: bool) -> dict:
        r = subprocess.run([sys.executable, "-I", "-c", CONTAINER, str(ROOT), "1" if no_landlock else "0"],
                           capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    out = container(no_landlock=False)
    if HAS["bubblewrap"]:  # installed, and it cannot start here
        assert "bwrap cannot start here (bwrap: No permissions to create new namespace" in out["bubblewrap"], out
    assert out["landlock"] is None and out["chosen"] == "landlock", out
    assert out["ping"] == "pong" and out["worker"] == "landlock", out  # a confined job ran, no privileges needed
    out = container(no_landlock=True)
    assert "none can start here" in out["error"] and "a container's seccomp policy?" in out["error"], out
    assert "--unconfined" in out["error"]


def test_a_worker_that_skipped_landlock_refuses_to_start(tmp_path: Path) -> None:
    """Started for Landlock but booted without boundary.enter(): the worker stops before it serves a job."""
    env = {"PATH": "/usr/bin:/bin", boundary.ENV_INSIDE: "1", boundary.ENV_BOUNDARY: "landlock",
           boundary.ENV_SCRATCH: str(tmp_path)}
    boot = "import sys; sys.path.insert(0, sys.argv[1]); from worldfactory import confine; confine.main()"
    r = subprocess.run([sys.executable, "-I", "-B", "-c", boot, str(ROOT)], capture_output=True, text=True,
                       env=env, timeout=60, input="")
    assert r.returncode != 0 and "started to run under Landlock but has not restricted itself" in r.stderr, r.stderr
    assert r.stdout == ""  # not even "ready"


def test_no_boundary_stops_a_build_before_any_work(tmp_path: Path, small_templates: Path) -> None:
    env = {**os.environ, "PATH": str(fake_bwrap(tmp_path / "bin")), "WORLDFACTORY_TEMPLATES": str(small_templates),
           boundary.ENV_BOUNDARY: "bubblewrap"}
    r = subprocess.run([PYTHON, "-m", "worldfactory.cli", "build", SMALL[0], "--no-dagster"], capture_output=True,
                       text=True, env={**env, "WORLDFACTORY_DATA": str(tmp_path / "data")}, timeout=120)
    assert r.returncode == 2 and "error: WORLDFACTORY_BOUNDARY=bubblewrap was asked for" in r.stderr, r.stderr
    assert "--unconfined" in r.stderr and not (tmp_path / "data" / "worlds").exists()


CHILD = """
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
from worldfactory import landlock
scratch, outside, port, apply = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
out = {"enforced": landlock.restrict((scratch,)) if apply else None}
for name, act in (("inside", lambda: open(os.path.join(scratch, "f"), "w").write("x")),
                  ("outside", lambda: open(outside, "w").write("escaped")),
                  ("connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=2).send(b"escaped")),
                  ("bind", lambda: socket.socket().bind(("127.0.0.1", 0)))):
    try:
        act()
        out[name] = "done"
    except OSError as exc:
        out[name] = exc.strerror
print(json.dumps(out))
"""


@needs_landlock
def test_landlock_refuses_writes_outside_and_tcp(tmp_path: Path) -> None:
    """Landlock alone, on a real process: writes only in the scratch folder, no TCP connect or bind. The
    control (the same child without the restriction) writes outside and reaches the listener."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]

    def child(apply: bool, outside: Path) -> dict:
        scratch = tmp_path / f"scratch-{apply}"
        scratch.mkdir()
        r = subprocess.run([sys.executable, "-I", "-c", CHILD, str(ROOT), str(scratch), str(outside), str(port),
                            "1" if apply else "0"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def heard() -> bytes:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            return b""
        with conn:
            return conn.recv(100)

    try:
        out = child(True, tmp_path / "escaped")
        assert out["enforced"]["network"] is (landlock.abi() >= 4)
        assert out["inside"] == "done" and out["outside"] == "Permission denied", out
        assert not (tmp_path / "escaped").exists()
        if landlock.abi() >= 4:
            assert out["connect"] == "Permission denied" and out["bind"] == "Permission denied", out
        assert heard() == b""
        control = child(False, tmp_path / "control")
        assert control["outside"] == control["connect"] == control["bind"] == "done", control
        assert (tmp_path / "control").read_text() == "escaped" and heard() == b"escaped"
    finally:
        listener.close()


def _build(tmp_path: Path, templates: Path, kind: str) -> tuple[Path, str]:
    """`worldfactory build` of a small world under one boundary (or --unconfined): its bundle and output."""
    data = tmp_path / kind
    env = {**os.environ, "WORLDFACTORY_TEMPLATES": str(templates), "WORLDFACTORY_DATA": str(data)}
    args = ["--unconfined"] if kind == "unconfined" else []
    if kind != "unconfined":
        env[boundary.ENV_BOUNDARY] = kind
    r = subprocess.run([PYTHON, "-m", "worldfactory.cli", "build", SMALL[0], "--no-dagster", *args],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return data / "worlds" / SMALL[0], r.stderr


SAID = {"bubblewrap": "bubblewrap+seccomp", "landlock": "landlock+seccomp", "unconfined": "nothing (--unconfined"}


@needs_landlock
def test_build_under_each_boundary_records_it(tmp_path: Path, small_templates: Path, small_data: Path) -> None:
    """The same world under Landlock and --unconfined as the shared build (the default boundary here,
    bubblewrap where it starts): byte for byte the same bundle but for world.json's `boundary`, which
    the build's output names too; none of them is stale for another (the boundary is not an input)."""
    reference = small_data / "worlds" / SMALL[0]
    bundles = {json.loads((reference / "world.json").read_text())["boundary"]: reference}
    assert next(iter(bundles)) == boundary.choose()
    for kind in ("landlock", "unconfined"):
        bundles[kind], said = _build(tmp_path, small_templates, kind)
        assert f"generated code runs under: {SAID[kind]}" in said, said
        assert json.loads((bundles[kind] / "world.json").read_text())["boundary"] == kind
    assert len(bundles) == 3 or not HAS["bubblewrap"]
    names = sorted(p.name for p in reference.iterdir())
    for kind, bundle in bundles.items():
        assert sorted(p.name for p in bundle.iterdir()) == names
        for name in names:
            a, b = (reference / name).read_bytes(), (bundle / name).read_bytes()
            if name == "world.json":
                a, b = (json.dumps({**json.loads(x), "boundary": None}).encode() for x in (a, b))
            assert a == b, f"{name} differs between {next(iter(bundles))} and {kind}"
    from worldfactory.stages.core import inputs_fingerprint
    from worldfactory.stages.pipeline import is_up_to_date
    from worldfactory.templates import load_templates

    inputs = inputs_fingerprint(load_templates(small_templates), SMALL[0], tmp_path / "briefs")
    assert all(is_up_to_date(b, inputs) for b in bundles.values())


@needs_landlock
def test_serve_over_http_under_landlock(worlds_dir: Path, tmp_path: Path) -> None:
    """`serve` re-executes itself under Landlock: the inherited listening socket accepts, tools answer,
    and the scratch folder made for it is there while it serves and gone after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = next(p for p in sorted(worlds_dir.iterdir()) if (p / "world.json").is_file())
    env = {**os.environ, boundary.ENV_BOUNDARY: "landlock"}
    env.pop("WORLDFACTORY_CONTROL_TOKEN", None)
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "serve", str(world), "--transport", "http", "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    scratch = f"{boundary.SCRATCH_PREFIX}{proc.pid}-"
    try:
        health, deadline = None, time.monotonic() + 60
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            while health is None:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                try:
                    health = http.get("/healthz").json()
                except httpx2.TransportError:
                    time.sleep(0.1)
        assert list(Path(tempfile.gettempdir()).glob(f"{scratch}*")), "no scratch folder for the served process"
        manifest = json.loads((world / "tools.json").read_text())
        get = next(t for t in manifest if t["kind"] == "get")

        async def call() -> bool:
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                tools = await c.list_tools()
                assert get["name"] in {t.name for t in tools.tools}
                result = await c.call_tool(get["name"], get["examples"]["valid"])
                return not result.is_error

        assert anyio.run(call)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert not list(Path(tempfile.gettempdir()).glob(f"{scratch}*"))

"""A quiet, predictable command line, tried as a new user tries it: real `worldfactory` subprocesses."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import PYTHON, ROOT, SMALL
from worldfactory import cli
from worldfactory.briefs import check_world_id
from worldfactory.runtime.world import World, WorldError
from worldfactory.templates import load_templates

WORLD = SMALL[0]  # help-desk.small--v001, of the small template set
# Dagster's API-stability warnings: a fresh `build --examples` once printed 27 such blocks (checked on build
# and delete in test_dagster.py::test_cli_build_registers_and_delete_removes, and on `ui` below)
STABILITY = re.compile(r"BetaWarning|PreviewWarning|SupersessionWarning")


def wf(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)


def small_env(data: Path, templates: Path) -> dict[str, str]:
    return {"WORLDFACTORY_DATA": str(data), "WORLDFACTORY_TEMPLATES": str(templates),
            "DAGSTER_HOME": str(data.parent / f"{data.name}-dagster-home")}


# --- seeds: whole IDs, at any width ------------------------------------------------------------------------

def _on_terminal(args: list[str], columns: int) -> str:
    """The command's output on a pseudo-terminal `columns` wide (Rich reads COLUMNS)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", *args], stdout=follower, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb"})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode()


@pytest.mark.parametrize("columns", [40, 80, 250])
def test_seeds_never_cuts_a_seed_type_or_world_id(columns: int) -> None:
    ts = load_templates()
    from worldfactory.seeds import seed_types

    outputs = {"terminal": _on_terminal(["seeds"], columns)}
    if columns == 40:  # piped, as in `worldfactory seeds | grep claims`, with a narrow COLUMNS too
        outputs["piped"] = wf("seeds", env={"COLUMNS": "40"}).stdout
    for where, out in outputs.items():
        assert "…" not in out, (where, out[:2000])
        words = set(re.findall(r"[a-z0-9.-]+", out))
        for seed in seed_types(ts):
            assert seed in words and f"{seed}--v001" in words, (where, seed)


# --- a closed pipe ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["seeds"], ["seeds", "--json"], ["pack-schema"]])
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    """`worldfactory seeds | head -1`: the reader is gone before the first write, every time (its end is closed)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], stdout=write_end, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    assert r.returncode != 0  # nothing reached the reader: not a success


# --- --version, --help defaults, --data ---------------------------------------------------------------------

def test_version() -> None:
    r = wf("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"worldfactory {version('worldfactory')}"


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return found


def test_every_help_shows_its_defaults() -> None:
    subs = _subparsers(cli.parser())
    assert {"build", "run", "show", "serve", "replay", "page", "ui", "brief new"} <= set(subs)
    for name, sub in subs.items():
        for action in sub._actions:
            if not action.option_strings or any(action.default is v for v in (None, False, argparse.SUPPRESS)):
                continue
            formatter = sub._get_formatter()  # the lines `--help` prints for this one option
            formatter.add_argument(action)
            assert "default" in formatter.format_help(), (name, action.option_strings, formatter.format_help())
    assert "(default: oracle)" in " ".join(wf("run", "--help").stdout.split())


def test_data_on_every_command_that_reads_worlds(small_data: Path, tmp_path: Path) -> None:
    """From a folder with no data/ and no $WORLDFACTORY_DATA: --data finds the world for each command."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"WORLDFACTORY_DATA": ""}
    data = ["--data", str(small_data)]
    assert wf("show", WORLD, env=env, cwd=elsewhere).returncode == 2  # the fault: without --data, not found
    show = wf("show", WORLD, "--json", *data, env=env, cwd=elsewhere)
    assert show.returncode == 0 and json.loads(show.stdout)["world_id"] == WORLD, show.stderr
    task = json.loads((small_data / "worlds" / WORLD / "tasks.jsonl").read_text().splitlines()[0])["task_id"]
    trace = tmp_path / "trace.jsonl"
    run = wf("run", WORLD, task, "--trace", str(trace), *data, env=env, cwd=elsewhere)
    assert run.returncode == 0 and "PASSED" in run.stdout, run.stderr
    replay = wf("replay", str(trace), *data, env=env, cwd=elsewhere)
    assert replay.returncode == 0 and "identical at every step" in replay.stdout, replay.stderr
    page = wf("page", WORLD, "--out", str(tmp_path / "page.html"), *data, env=env, cwd=elsewhere)
    assert page.returncode == 0 and (tmp_path / "page.html").read_bytes().startswith(b"<!"), page.stderr
    serve = wf("serve", WORLD, "--help", env=env)
    assert "--data" in serve.stdout


def test_run_with_a_trace_prints_a_count_not_every_step(small_data: Path, tmp_path: Path) -> None:
    world = World.open(small_data / "worlds" / WORLD)
    task = max(world.tasks.values(), key=lambda t: len(t.oracle))
    env = {"WORLDFACTORY_DATA": str(small_data)}
    trace = tmp_path / "t.jsonl"
    quiet = wf("run", WORLD, task.task_id, "--trace", str(trace), env=env)
    assert quiet.returncode == 0, quiet.stderr
    calls = len(trace.read_text().splitlines()) - 1  # a header line, then one line per call
    assert calls == len(task.oracle) >= 3
    lines = quiet.stdout.splitlines()  # the instruction (wrapped), a count, the trace, the verdict
    counted = next(i for i, line in enumerate(lines) if "tool call(s)" in line)
    assert lines[0].startswith(f"{task.task_id}: ") and len(lines) - counted <= 3, quiet.stdout
    assert f"{calls} tool call(s), 0 error(s)" in quiet.stdout and str(trace) in quiet.stdout
    loud = wf("run", WORLD, task.task_id, "--steps", env=env)
    assert len(loud.stdout.splitlines()) >= calls + 2 and task.oracle[0].tool in loud.stdout


# --- a seed type for a world ID; World.open finds worlds as the CLI does ------------------------------------

def test_show_a_seed_type_suggests_a_command_that_works(small_data: Path, tmp_path: Path,
                                                        small_templates: Path) -> None:
    env = {"WORLDFACTORY_DATA": str(small_data), "WORLDFACTORY_TEMPLATES": str(small_templates)}
    seed_type = WORLD.split("--")[0]
    r = wf("show", seed_type, env=env)
    assert r.returncode == 2 and f"`worldfactory show {WORLD}`" in r.stderr, r.stderr
    suggested = re.search(r"`worldfactory ([^`]+)`", r.stderr)
    assert suggested is not None
    again = wf(*suggested.group(1).split(), env=env)
    assert again.returncode == 0 and WORLD in again.stdout, again.stderr
    # not built yet: the suggested build names the world ID, which `build` accepts
    empty = {**env, "WORLDFACTORY_DATA": str(tmp_path)}
    r = wf("show", seed_type, env=empty)
    suggested = re.search(r"`worldfactory build ([^`]+)`", r.stderr)
    assert r.returncode == 2 and suggested is not None and suggested.group(1) == WORLD, r.stderr
    check_world_id(WORLD, load_templates(small_templates), tmp_path / "briefs")  # raises if `build` would refuse


def test_world_open_resolves_a_world_id_as_the_cli_does(small_data: Path, tmp_path: Path, small_templates: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDFACTORY_DATA", str(small_data))
    assert World.open(WORLD).world_id == WORLD  # $WORLDFACTORY_DATA/worlds/WORLD
    # the default: data/ under the working directory, where `worldfactory build` puts it (a relative root)
    env = {"WORLDFACTORY_DATA": "", "WORLDFACTORY_TEMPLATES": str(small_templates)}
    r = wf("build", WORLD, "--no-dagster", env=env, cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "data" / "worlds" / WORLD / "world.json").is_file(), r.stderr
    monkeypatch.delenv("WORLDFACTORY_DATA")
    monkeypatch.chdir(tmp_path)
    assert World.open(WORLD).world_id == WORLD
    with pytest.raises(WorldError, match="not built under"):
        World.open("help-desk.small--v009")


# --- the world server's port ---------------------------------------------------------------------------------

def test_serve_default_port_is_not_the_model_servers() -> None:
    docs = "".join(p.read_text() for p in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))))
    model_ports = set(re.findall(r"--base-url http://127\.0\.0\.1:(\d+)/v1", docs))
    assert "8000" in model_ports  # the docs' model server (vLLM)
    port = cli.parser().parse_args(["serve", WORLD]).port
    assert str(port) not in model_ports
    serve_lines = [line for line in docs.splitlines() if "serve" in line and "--transport http" in line]
    assert serve_lines and any(f":{port}/mcp" in line for line in serve_lines)


# --- ui: signals reach Dagster, nothing is left behind ------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (every process `ui` starts inherits DAGSTER_HOME)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if marker.encode() in proc.joinpath("environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


def test_ui_stops_every_dagster_process_on_ctrl_c(tmp_path: Path, small_templates: Path) -> None:
    """SIGINT (Ctrl-C) to `worldfactory ui` stops the webserver, daemon and code servers. SIGTERM is
    tests/test_dagster_ui.py's, after its backfill: each start of the UI costs about 25 CPU seconds."""
    sig = signal.SIGINT
    port = _free_port()
    env = {**small_env(tmp_path / "data", small_templates), "PYTHONUNBUFFERED": "1"}
    marker = f"DAGSTER_HOME={env['DAGSTER_HOME']}"
    out = tmp_path / "ui.log"
    with out.open("w") as log:
        wrapper = subprocess.Popen([PYTHON, "-m", "worldfactory.cli", "ui", "--port", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 240
        while not _answers(port):
            assert wrapper.poll() is None, out.read_text()
            assert time.monotonic() < deadline, "the Dagster UI never answered: " + out.read_text()[-3000:]
            time.sleep(0.5)
        assert _processes_with(marker)
        wrapper.send_signal(sig)
        wrapper.wait(timeout=60)
        assert not _answers(port), "the webserver still answers after `worldfactory ui` was stopped"
        left = _processes_with(marker)
        assert not left, f"Dagster processes left behind: {left}"
        assert not STABILITY.search(out.read_text()), out.read_text()[-3000:]
    finally:
        for pid in _processes_with(marker):  # a failed test leaves nothing running either
            os.kill(pid, signal.SIGKILL)
        if wrapper.poll() is None:
            wrapper.kill()


# --- the docs' screenshots (docs/worlds.md) ------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="headless Chromium (Debian package `chromium`) is not installed")
def test_screenshots_are_made_from_the_current_build(small_data: Path, tmp_path: Path) -> None:
    assert "screenshots:" in (ROOT / "Makefile").read_text()
    assert "make screenshots" in (ROOT / "docs" / "worlds.md").read_text()
    r = subprocess.run([PYTHON, str(ROOT / "docs" / "screenshots.py"), "--data", str(small_data), "--world", WORLD,
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for name, size in (("world-page.png", (1280, 1800)), ("catalog-site.png", (1280, 1300))):
        png = (tmp_path / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
        assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == size

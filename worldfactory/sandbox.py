"""Runs generated tool code in a locked-down child process before a world accepts it.

Layers: a static check of tools.py (parses, imports only the toolkit and typing, no dynamic
code), then a child `python -I -B` with an empty environment, CPU and memory rlimits, and an
audit hook that refuses network, processes, native code and file writes. The child opens the
world from its folder and runs every tool's probe calls; the parent reads a JSON report.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ALLOWED_IMPORTS = {"__future__", "typing", "worldfactory.runtime.toolkit"}
FORBIDDEN_NAMES = {"exec", "eval", "compile", "open", "__import__", "globals", "locals", "getattr", "setattr",
                   "delattr", "vars", "breakpoint", "input"}
BLOCKED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.spawn",
                  "ctypes.", "os.remove", "os.rename", "os.unlink", "shutil.")
BLOCKED_MODULES = {"socket", "subprocess", "ctypes", "_ctypes", "multiprocessing", "urllib.request", "http.client"}
CPU_SECONDS = 60
MEMORY_BYTES = 3 << 30
TIMEOUT_S = 180


class SandboxError(ValueError):
    """Generated code failed a sandbox check; the message says which tool and why."""


def static_check(source: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SandboxError(f"tools.py does not parse: {exc}") from exc
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name not in ALLOWED_IMPORTS]
            if bad:
                raise SandboxError(f"tools.py line {node.lineno}: import of {', '.join(bad)} is not allowed")
        elif isinstance(node, ast.ImportFrom):
            if node.module not in ALLOWED_IMPORTS:
                raise SandboxError(f"tools.py line {node.lineno}: import from {node.module} is not allowed")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            raise SandboxError(f"tools.py line {node.lineno}: use of '{node.id}' is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise SandboxError(f"tools.py line {node.lineno}: dunder attribute '{node.attr}' is not allowed")


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    os.setsid()


def run_probes(world: Any) -> dict[str, Any]:
    """Every tool's probes on fresh episodes: valid calls succeed; invalid ones fail, say why, change nothing."""
    failures: list[str] = []
    calls = 0
    for entry in world.tool_manifest:
        name = entry["name"]
        examples = entry.get("examples") or {}
        valid = examples.get("valid")
        if valid is not None:
            with world.episode() as ep:
                res = ep.call(name, valid)
                calls += 1
                if not res.ok:
                    failures.append(f"{name}: valid call {valid} failed: {res.error}")
        for bad in examples.get("invalid", []):
            with world.episode() as ep:
                before = ep.state_key()
                res = ep.call(name, bad["args"])
                calls += 1
                if res.ok:
                    failures.append(f"{name}: invalid call {bad['args']} succeeded")
                elif bad["expect"] not in (res.error or ""):
                    failures.append(f"{name}: error for {bad['args']} was '{res.error}', expected '{bad['expect']}'")
                elif ep.state_key() != before:
                    failures.append(f"{name}: failed call {bad['args']} changed the database")
    return {"tools": len(world.tool_manifest), "calls": calls, "failures": failures}


def _install_guard() -> None:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "sqlite3.connect" and args and args[0] != ":memory:":
            raise PermissionError(f"sandbox: opening database {args[0]} blocked")
        if event.startswith(BLOCKED_EVENTS):
            raise PermissionError(f"sandbox: {event} blocked")
        if event == "import" and args and args[0] in BLOCKED_MODULES:
            raise PermissionError(f"sandbox: import {args[0]} blocked")
        if event == "open" and len(args) > 1 and isinstance(args[1], str) and any(m in args[1] for m in "wax+"):
            raise PermissionError(f"sandbox: writing {args[0]} blocked")

    sys.addaudithook(hook)


def _child(folder: str) -> None:
    from worldfactory.runtime.world import World

    files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
    _install_guard()
    world = World(files)
    print(json.dumps(run_probes(world)))


def check_tools_in_sandbox(folder: Path) -> dict[str, Any]:
    """Static check, then the probe run in a child process; raises SandboxError on any failure."""
    static_check((folder / "tools.py").read_text())
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [sys.executable, "-I", "-B", "-m", "worldfactory.sandbox", str(folder.resolve())],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env, preexec_fn=_limits, cwd=str(folder.resolve()),
    )
    if proc.returncode != 0:
        raise SandboxError(f"sandbox child exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if report["failures"]:
        raise SandboxError(f"{len(report['failures'])} tool probes failed: " + "; ".join(report["failures"][:5]))
    return report


if __name__ == "__main__":
    _child(sys.argv[1])

"""The probe run that proves a world's tools, confined: sandbox.py's static check, then every tool's
probe calls (sandbox.run_probes) in the confined worker (worldfactory.confine: bubblewrap, seccomp,
rlimits, audit hook). With the explicit opt-out (--unconfined) the probes run in a child
`python -I -B` with an empty environment, rlimits and the audit hook, the Python-level layers only.

It sits in the confine layer, above the runtime's static check (sandbox.py), which never imports it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from worldfactory import confine
from worldfactory.sandbox import SandboxError, run_probes, static_check

CPU_SECONDS = 60
MEMORY_BYTES = 3 << 30
TIMEOUT_S = 180


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    os.setsid()


def _child(folder: str) -> None:
    """The unconfined fallback's child: the Python-level layers only (rlimits, the audit hook)."""
    from worldfactory.runtime.world import World

    files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
    sys.addaudithook(confine._audit)
    world = World(files)
    print(json.dumps(run_probes(world)))


def check_tools_in_sandbox(folder: Path) -> dict[str, Any]:
    """Static check, then the probe run confined; raises SandboxError on any failure.

    Confined means in the worker of worldfactory.confine (bubblewrap, seccomp, rlimits, audit
    hook); with the explicit opt-out, a child `python -I` with rlimits and the audit hook.
    """
    static_check((folder / "tools.py").read_text())
    if confine.inside() or confine.confined_here():
        files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        report = confine.run_job("probes", files=files)
    else:
        report = _probes_in_child(folder)
    if report["failures"]:
        raise SandboxError(f"{len(report['failures'])} tool probes failed: " + "; ".join(report["failures"][:5]))
    return report


def _probes_in_child(folder: Path) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [sys.executable, "-I", "-B", "-m", "worldfactory.tool_probes", str(folder.resolve())],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env, preexec_fn=_limits, cwd=str(folder.resolve()),
    )
    if proc.returncode != 0:
        raise SandboxError(f"sandbox child exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    _child(sys.argv[1])

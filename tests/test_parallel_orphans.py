"""A killed build takes its worker processes with it: nothing keeps building unseen."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.conftest import PYTHON, ROOT
from worldfactory.parallel import emit

PARENT = """
import sys
from worldfactory.parallel import run_in_processes
from tests.test_parallel_orphans import _linger
run_in_processes(_linger, [1, 2], 2, on_result=lambda *a: None,
                 on_event=lambda *e: print(*e, flush=True))
"""


def _linger(x: int) -> int:
    emit("worker", os.getpid())
    time.sleep(120)
    return x


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_workers_die_when_the_parent_is_killed() -> None:
    parent = subprocess.Popen([PYTHON, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert parent.stdout is not None
    workers = [int(parent.stdout.readline().split()[1]) for _ in range(2)]
    assert all(_alive(pid) for pid in workers)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "a worker outlived the build that started it"

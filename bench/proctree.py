"""Memory of a process tree, for benches that start a confined server (bwrap puts it a few processes down)."""

from __future__ import annotations

from pathlib import Path


def tree_memory_mib(pid: int, field: str = "VmRSS") -> float:
    """The largest `field` (VmRSS now, VmHWM peak) of any process under pid, in MiB."""
    best = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(f"{field}:"):
                    best = max(best, int(line.split()[1]) / 1024)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return best

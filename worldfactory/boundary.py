"""Which OS boundary confines generated code on this machine, and how a process is started under it.

Two boundaries, the first that can start wins (probed once per process):

- `bubblewrap`: the child gets its own user, PID, IPC, UTS and network namespaces, a read-only `/`
  and a private tmpfs scratch folder. Needs the `bwrap` binary and unprivileged user namespaces,
  which containers without them (many training clusters) and locked-down hosts refuse.
- `landlock`: needs no privileges at all. The child restricts itself first thing at start-up
  (`enter`, before any engine or generated code is imported): read and execute anywhere, write only
  beneath a scratch folder the parent made for it (removed when it is done), no TCP bind or connect
  (Landlock ABI 4+), no signals to or abstract sockets of processes outside (ABI 6+), in its own
  session, killed when its parent dies.

Both then run the same in-process layers (worldfactory.confine.harden: seccomp, no fork/exec/socket;
the audit hook) under the same rlimits. WORLDFACTORY_BOUNDARY=bubblewrap|landlock forces one.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worldfactory import landlock

ENV_BOUNDARY = "WORLDFACTORY_BOUNDARY"  # outside: the boundary asked for; inside: the one in force
ENV_INSIDE = "WORLDFACTORY_CONFINED"
ENV_SCRATCH = "WORLDFACTORY_SCRATCH"  # inside Landlock: the one folder it may write
ENV_PARENT = "WORLDFACTORY_PARENT_PID"
BOUNDARIES = ("bubblewrap", "landlock")
SCRATCH = "/var/tmp"  # bubblewrap's private tmpfs (TMPDIR, HOME and the working folder)
SCRATCH_PREFIX = "worldfactory-scratch-"
PR_SET_PDEATHSIG = 1
HOW_TO = ("install the Debian package `bubblewrap` (apt-get install bubblewrap) where user namespaces are "
          "allowed, or use a kernel with Landlock (Linux 5.13+ with landlock in its lsm= list), or, for "
          "development only, run it unconfined with --unconfined or WORLDFACTORY_UNCONFINED=1")


class ConfinementError(RuntimeError):
    """Generated code cannot run confined here (no boundary can start), or the confined worker failed."""


# --- the choice ----------------------------------------------------------------------------------------

@functools.cache
def _bwrap_fails(path: str) -> str | None:
    """Why bubblewrap at `path` cannot start a confined process here (its own words), or None."""
    try:
        out = subprocess.run([*bwrap_argv(path), shutil.which("true") or "/bin/true"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot start here ({exc})"
    if out.returncode != 0:
        said = out.stderr.strip().splitlines() or [f"exit {out.returncode}"]
        return f"bwrap cannot start here ({said[-1]})"
    return None


def why_not(kind: str) -> str | None:
    """Why the boundary `kind` cannot confine here, or None when it can."""
    if kind == "bubblewrap":
        path = shutil.which("bwrap")
        return "bubblewrap is not installed" if path is None else _bwrap_fails(path)
    if kind == "landlock":
        return landlock.missing()
    raise ConfinementError(f"{ENV_BOUNDARY}={kind!r}: not a boundary; use one of {', '.join(BOUNDARIES)} "
                           "(or leave it unset to take the first that works)")


def choose() -> str:
    """The boundary generated code runs under here: the forced one, else the first of BOUNDARIES that starts."""
    forced = os.environ.get(ENV_BOUNDARY, "").strip().lower()
    if forced:
        reason = why_not(forced)
        if reason is not None:
            raise ConfinementError(f"{ENV_BOUNDARY}={forced} was asked for, but {reason}; unset it to use "
                                   f"whichever boundary works here, or {HOW_TO}")
        return forced
    reasons: dict[str, str] = {}
    for kind in BOUNDARIES:
        reason = why_not(kind)
        if reason is None:
            return kind
        reasons[kind] = reason
    said = "; ".join(f"{k}: {r}" for k, r in reasons.items())
    raise ConfinementError(f"running generated tool code needs an OS sandbox, and none can start here ({said}); "
                           f"{HOW_TO}")


def describe(kind: str) -> str:
    """One line for the build's output: the boundary and what it holds."""
    if kind == "unconfined":
        return "nothing (--unconfined: development only; each world.json records it)"
    if kind == "bubblewrap":
        return "bubblewrap+seccomp (own namespaces, no network, read-only /, rlimits, audit hook)"
    version = landlock.abi()
    net = "no TCP" if version >= 4 else "TCP not restricted by this kernel (Landlock ABI < 4)"
    return f"landlock+seccomp (Landlock ABI {version}: writes only to a scratch folder, {net}; rlimits, audit hook)"


# --- starting a confined process ------------------------------------------------------------------------

def bwrap_argv(path: str | None = None) -> list[str]:
    """bubblewrap's arguments: every namespace, read-only /, a private scratch tmpfs, no capabilities."""
    path = path or shutil.which("bwrap")
    if path is None:
        raise ConfinementError(f"bubblewrap is not installed; {HOW_TO}")
    return [path, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", SCRATCH,
            "--clearenv", *[a for k, v in _inside_env("bubblewrap", SCRATCH).items() for a in ("--setenv", k, v)],
            "--chdir", SCRATCH, "--"]


def _inside_env(kind: str, scratch: str) -> dict[str, str]:
    """The confined process's whole environment: nothing of the caller's but the debug switch."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": scratch, "HOME": scratch,
           "WORLDFACTORY_DEBUG": os.environ.get("WORLDFACTORY_DEBUG", ""), ENV_INSIDE: "1", ENV_BOUNDARY: kind}
    if kind == "landlock":
        env |= {ENV_SCRATCH: scratch, ENV_PARENT: str(os.getpid())}
    return env


class Started:
    """A process started under a boundary, and the scratch folder made for it (removed by `done`, or at exit)."""

    def __init__(self, kind: str, python_args: list[str], limits: Callable[[], None], **popen: Any) -> None:
        self.kind = kind
        self.scratch: str | None = None  # bubblewrap's is a tmpfs inside; Landlock's a folder here
        self._finalize: weakref.finalize | None = None
        cmd = [sys.executable, "-I", "-B", *python_args]
        if kind == "bubblewrap":
            self.proc = subprocess.Popen([*bwrap_argv(), *cmd], preexec_fn=limits, **popen)
            return
        _remove_stale_scratch()
        self.scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        self._finalize = weakref.finalize(self, _remove, self.scratch, os.getpid())
        try:
            self.proc = subprocess.Popen(cmd, env=_inside_env(kind, self.scratch), cwd=self.scratch,
                                         preexec_fn=limits, start_new_session=True, **popen)
        except BaseException:
            self.done()
            raise

    def done(self) -> None:
        """The process has ended (or is abandoned): its scratch folder goes."""
        if self._finalize is not None:
            self._finalize()


def _remove(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child exiting leaves its parent's folder alone
        shutil.rmtree(folder, ignore_errors=True)


def _remove_stale_scratch() -> None:
    """Scratch folders of processes that are gone (killed before they could remove them)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        try:
            os.kill(int(folder.name[len(SCRATCH_PREFIX):].split("-", 1)[0]), 0)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # another user's process, alive


# --- inside the confined process -------------------------------------------------------------------------

def enter() -> None:
    """First thing in a confined process: put the boundary's in-process part in place for good.

    Under bubblewrap the namespaces already hold; under Landlock the process restricts itself here,
    before the engine or any generated code is imported, and dies with the parent that started it.
    """
    if os.environ.get(ENV_INSIDE) != "1" or os.environ.get(ENV_BOUNDARY) != "landlock":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(os.environ.get(ENV_PARENT, "0")):
        os._exit(1)  # the parent died before the line above: nobody is waiting for this process
    landlock.restrict((os.environ[ENV_SCRATCH],))
    _ENTERED.append("landlock")


_ENTERED: list[str] = []


def check_entered() -> None:
    """Before the in-process layers go on: a process started for Landlock must have restricted itself."""
    if os.environ.get(ENV_INSIDE) == "1" and os.environ.get(ENV_BOUNDARY) == "landlock" and not _ENTERED:
        raise ConfinementError("this process was started to run under Landlock but has not restricted itself "
                               "(worldfactory.boundary.enter() must run first); refusing to run generated code")

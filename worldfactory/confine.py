"""The OS boundary around generated code: one confined worker process per Python process.

Everything that executes a world's tools.py (the build stages that run tools, rollouts, `run`,
`replay`, `serve`) does it inside a process started under an OS boundary (worldfactory.boundary):
bubblewrap, which puts it in its own user, PID, IPC, UTS and network namespaces (no network at
all) with a read-only view of the whole file system except a private tmpfs scratch folder and all
capabilities dropped; or, where bubblewrap cannot start (no root, no user namespaces), Landlock,
which needs no privileges: writes only beneath a scratch folder, no TCP. Either way rlimits bound
CPU time, address space, open files and file size, and inside, before any generated code is
loaded, the process installs a seccomp filter (no
fork, vfork, non-thread clone, execve or socket: no new processes, no new sockets) and an audit
hook (the Python-level layer: no imports of process, network or native-code modules, no file
writes), and World refuses tools.py files that step outside the generator's allowlist.

The worker is started once (about half a second) and reused across stages and worlds. The
parent sends it whole jobs (a probe run here; the layers above register theirs with
register_job: a build stage's make or prove, a batch of rollouts) or, for callers that need the
network themselves (a model policy), single episode steps. This module names no stage, policy or
rollout: it is a generic job runner. The parent never unpickles what the worker sends: messages
are JSON plus raw byte blobs, so a compromised worker can only send back data. `serve` re-executes
the whole server process under the same boundary instead (stdio passes through; HTTP inherits a
listening socket).

No boundary can start: running generated code fails with ConfinementError, saying what to install
or enable and naming the explicit opt-out (`--unconfined` or WORLDFACTORY_UNCONFINED=1: same code,
in this process).
"""

from __future__ import annotations

import builtins
import ctypes
import hashlib
import importlib
import json
import os
import platform
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worldfactory import boundary
from worldfactory.boundary import ENV_INSIDE, ConfinementError

ENV_UNCONFINED = "WORLDFACTORY_UNCONFINED"
MEMORY_BYTES = int(os.environ.get("WORLDFACTORY_SANDBOX_MEMORY_MB", "8192")) << 20
OPEN_FILES = 1024
FILE_BYTES = 1 << 30
CPU_HARD_SECONDS = 24 * 3600  # the process's whole life; each job also gets a soft limit
JOB_CPU_SECONDS = 1800
JOB_WALL_SECONDS = 3600
MAX_MESSAGE = 8 << 30


# --- policy ------------------------------------------------------------------------------------------

def inside() -> bool:
    """True in the confined worker (or a confined server): generated code runs here directly."""
    return _HARDENED


def unconfined() -> bool:
    """The explicit opt-out: generated code runs in this process with only the Python-level layers."""
    return os.environ.get(ENV_UNCONFINED, "").strip().lower() in ("1", "true", "yes", "on")


def set_unconfined(flag: bool = True) -> None:
    """The CLI's --unconfined: for this process and the processes it starts."""
    if flag:
        os.environ[ENV_UNCONFINED] = "1"


def confined_here() -> bool:
    """Whether generated code must be sent to the confined worker (not inside it, not opted out)."""
    return not inside() and not unconfined()


def boundary_name() -> str:
    """What generated code runs under from this process: "bubblewrap", "landlock" or "unconfined" (the
    development switch). Recorded in each world's world.json; ConfinementError when none can start."""
    if inside():
        return os.environ.get(boundary.ENV_BOUNDARY, "bubblewrap")
    return "unconfined" if unconfined() else boundary.choose()


def limits(open_files: int = OPEN_FILES) -> None:
    """rlimits for the confined process (run between fork and exec; inherited by the worker)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_files = min(open_files, hard) if hard != resource.RLIM_INFINITY else open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_HARD_SECONDS, CPU_HARD_SECONDS))
    resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))  # not enforced for root: seccomp is the real bar


# --- hardening inside the sandbox ----------------------------------------------------------------------

_HARDENED = False
# x86_64 syscall numbers; other architectures keep bubblewrap, rlimits and the audit hook only.
_SYS = {"socket": 41, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "ptrace": 101, "mount": 165,
        "unshare": 272, "setns": 308, "execveat": 322, "bpf": 321, "clone3": 435, "io_uring_setup": 425}
_DENIED_SYSCALLS = ("socket", "fork", "vfork", "execve", "execveat", "ptrace", "mount", "unshare", "setns", "bpf",
                    "io_uring_setup")
CLONE_THREAD = 0x00010000
BLOCKED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.spawn",
                  "os.forkpty", "pty.", "ctypes.", "os.remove", "os.rename", "os.unlink", "os.rmdir", "os.mkdir",
                  "os.chmod", "os.chown", "os.link", "os.symlink", "os.truncate", "shutil.", "sqlite3.enable_load",
                  "sqlite3.load_extension", "os.kill", "os.killpg", "signal.pthread_kill")
BLOCKED_MODULES = {"socket", "_socket", "subprocess", "_posixsubprocess", "ctypes", "_ctypes", "multiprocessing",
                   "_multiprocessing", "urllib.request", "http.client", "pty", "ssl", "_ssl", "select", "mmap"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def seccomp_program() -> bytes:
    """A classic BPF seccomp filter: no new processes, no exec, no sockets (socketpair stays for asyncio)."""
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno_, kill = 0x7FFF0000, 0x00050000, 0x80000000
    denied = [_SYS[n] for n in _DENIED_SYSCALLS]
    n = len(denied)
    allow_at, eperm_at, enosys_at = 9 + n, 10 + n, 11 + n

    def to(target: int, at: int) -> int:
        return target - at - 1

    prog = [(ld, 0, 0, 4),  # the architecture
            (jeq, 1, 0, 0xC000003E),
            (ret, 0, 0, kill),
            (ld, 0, 0, 0),  # the syscall number
            (jge, to(eperm_at, 4), 0, 0x40000000)]  # the x32 ABI: refused
    prog += [(jeq, to(eperm_at, 5 + i), 0, nr) for i, nr in enumerate(denied)]
    prog += [(jeq, to(enosys_at, 5 + n), 0, _SYS["clone3"]),  # glibc then falls back to clone for threads
             (jeq, 0, to(allow_at, 6 + n), _SYS["clone"]),
             (ld, 0, 0, 16),  # clone's flags (low word of the first argument)
             (jset, to(allow_at, 8 + n), to(eperm_at, 8 + n), CLONE_THREAD),  # a thread, or a new process
             (ret, 0, 0, allow),
             (ret, 0, 0, errno_ | 1),  # EPERM
             (ret, 0, 0, errno_ | 38)]  # ENOSYS
    return b"".join(struct.pack("HBBI", c, jt, jf, k) for c, jt, jf, k in prog)


def _install_seccomp() -> bool:
    if platform.machine() != "x86_64" or not sys.platform.startswith("linux"):
        return False
    program = seccomp_program()
    libc = ctypes.CDLL(None, use_errno=True)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program)
    fprog = SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise ConfinementError(f"prctl(NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}")
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        raise ConfinementError(f"seccomp filter refused: errno {ctypes.get_errno()}")
    return True


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "sqlite3.connect" and args and args[0] not in (":memory:", b":memory:"):
        raise PermissionError(f"sandbox: opening database {args[0]!s:.80} blocked")
    if event == "socket.__new__" and len(args) > 1 and args[1] == 1:
        return  # AF_UNIX: asyncio's self-pipe (socketpair); seccomp refuses socket(2) itself
    if event.startswith(BLOCKED_EVENTS):
        raise PermissionError(f"sandbox: {event} blocked")
    if event == "import" and args and args[0] in BLOCKED_MODULES:
        raise PermissionError(f"sandbox: import {args[0]} blocked")
    if event == "open" and len(args) > 2 and not isinstance(args[0], int):  # an fd number opens nothing new
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(m in mode for m in "wax+")) or (isinstance(flags, int)
                                                                         and flags & _WRITE_FLAGS):
            raise PermissionError(f"sandbox: writing {args[0]!s:.80} blocked")


def harden(preload: tuple[str, ...] = ()) -> None:
    """Enter the Python-level layers for the rest of this process's life: seccomp, then the audit hook.

    Modules the trusted code will need are imported first: the hook refuses imports of process,
    network and native-code modules afterwards (asyncio, for one, imports socket).
    """
    global _HARDENED
    if _HARDENED:
        return
    boundary.check_entered()
    for name in ("asyncio", "json", "sqlite3", *preload):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional module (an HTTP parser uvicorn may use) that is not installed
            pass
    _install_seccomp()
    sys.addaudithook(_audit)
    _HARDENED = True


# --- the wire format: JSON headers and raw blobs, never pickle -----------------------------------------

def _pack(obj: Any, blobs: list[bytes]) -> Any:
    if isinstance(obj, bytes | bytearray | memoryview):
        blobs.append(bytes(obj))
        return {"$blob": len(blobs) - 1}
    if isinstance(obj, dict):
        return {str(k): _pack(v, blobs) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_pack(v, blobs) for v in obj]
    return obj


def _unpack(obj: Any, blobs: list[bytes]) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1 and "$blob" in obj and isinstance(obj["$blob"], int) and 0 <= obj["$blob"] < len(blobs):
            return blobs[obj["$blob"]]
        return {k: _unpack(v, blobs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, blobs) for v in obj]
    return obj


def send(stream: Any, obj: Any) -> None:
    blobs: list[bytes] = []
    head = json.dumps({"body": _pack(obj, blobs), "blobs": [len(b) for b in blobs]},
                      default=str, allow_nan=False).encode()
    stream.write(struct.pack("<Q", len(head)) + head)
    for b in blobs:
        stream.write(b)
    stream.flush()


def _read_exact(stream: Any, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(min(n - got, 1 << 24))
        if not chunk:
            raise EOFError("the confined worker closed its pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(stream: Any) -> Any:
    (size,) = struct.unpack("<Q", _read_exact(stream, 8))
    if size > MAX_MESSAGE:
        raise ConfinementError(f"the confined worker sent a {size}-byte header; refused")
    head = json.loads(_read_exact(stream, size))
    sizes = head.get("blobs", [])
    if not isinstance(sizes, list) or not all(isinstance(s, int) and 0 <= s for s in sizes) or sum(sizes) > MAX_MESSAGE:
        raise ConfinementError("the confined worker sent a malformed message; refused")
    blobs = [_read_exact(stream, s) for s in sizes]
    return _unpack(head.get("body"), blobs)


# --- the parent side ---------------------------------------------------------------------------------

# The confined process imports this very engine (the folder above this package), whatever is installed.
ENGINE_ROOT = str(Path(__file__).resolve().parent.parent)
# boundary.enter() first: under Landlock the process restricts itself before anything else is imported.
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from worldfactory import boundary; boundary.enter(); "
BOOT_WORKER = BOOT + "from worldfactory import confine; confine.main()"
BOOT_CLI = BOOT + "from worldfactory.cli import main; sys.exit(main(sys.argv[2:]))"

def register_errors(*classes: type[Exception]) -> None:
    """A layer above names the error types its jobs raise: a worker's failure of that type (by name) is
    re-raised here as that type, so messages and handlers read the same confined or not."""
    for cls in classes:
        _ERRORS[cls.__name__] = cls


_ERRORS: dict[str, type[Exception]] = {"ValueError": ValueError, "KeyError": KeyError,
                                       "PermissionError": PermissionError}


def _error_class(name: str) -> type[Exception]:
    """The exception type to re-raise a worker's failure as (its name kept, so messages read the same)."""
    from worldfactory.data_root import WorldError
    from worldfactory.sandbox import SandboxError
    from worldfactory.templates import TemplateError

    register_errors(WorldError, SandboxError, TemplateError)  # the layers below this one: named here
    if name in _ERRORS:
        return _ERRORS[name]
    builtin = getattr(builtins, name, None)  # a programming error in the worker keeps its own type
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        return builtin
    return ConfinementError  # other types are the worker's own; the message names them (see request)


class Worker:
    """The confined child and its pipes; one request at a time."""

    def __init__(self, kind: str) -> None:
        self.boundary = kind
        self.started = time.perf_counter()
        self._launch = boundary.Started(kind, ["-c", BOOT_WORKER, ENGINE_ROOT], limits, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True)
        self.proc = self._launch.proc
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.cpu = 0.0  # CPU seconds the worker reported for its jobs
        self._stderr: list[bytes] = []
        threading.Thread(target=self._drain, daemon=True).start()
        hello = self._read()
        if hello != "ready":
            raise ConfinementError(f"the confined worker did not start: {self.stderr_tail()}")
        self.startup_seconds = time.perf_counter() - self.started

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-40]

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode(errors="replace").strip()[-2000:] or "(no output)"

    def _read(self) -> Any:
        try:
            return receive(self.proc.stdout)
        except (EOFError, struct.error, ValueError) as exc:
            self.proc.poll()
            raise ConfinementError(f"the confined worker stopped ({exc}; exit {self.proc.returncode}): "
                                   f"{self.stderr_tail()}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None and self.pid == os.getpid()

    def request(self, job: str, **args: Any) -> Any:
        with self.lock:
            # a whole job gets a wall-clock limit; a single episode step relies on the worker's CPU limit
            timer = threading.Timer(JOB_WALL_SECONDS, self.proc.kill) if not job.startswith("episode_") else None
            if timer is not None:
                timer.start()
            try:
                send(self.proc.stdin, {"job": job, "module": _JOB_MODULES.get(job), "args": args})
                reply = self._read()
            except BrokenPipeError:
                raise ConfinementError(f"the confined worker stopped: {self.stderr_tail()}") from None
            finally:
                if timer is not None:
                    timer.cancel()
        if not isinstance(reply, dict):
            raise ConfinementError("the confined worker sent a malformed reply")
        self.cpu += float(reply.get("cpu", 0.0) or 0.0)
        if not reply.get("ok"):
            name = str(reply.get("type", ""))
            cls = _error_class(name)
            message = str(reply.get("message", ""))[:8000]
            # a type made up here could not be pickled back from a build worker process: name it instead
            try:
                error = cls(f"{name[:60]}: {message}" if cls is ConfinementError else message)
            except TypeError:  # a built-in type that takes more than a message
                error = ConfinementError(f"{name[:60]}: {message}")
            raise error
        return reply.get("result")

    def close(self) -> None:
        if self.pid != os.getpid():
            return  # a forked child's copy: the worker is its parent's
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._launch.done()


_WORKERS: dict[str, Worker] = {}  # by boundary: one in use, unless WORLDFACTORY_BOUNDARY changes (tests)
_WORKER_LOCK = threading.Lock()


def worker() -> Worker:
    """This process's confined worker under the boundary in use, started on first use (the boundary is
    entered once, at the worker's start, never per call) and restarted if it died."""
    kind = boundary.choose()
    with _WORKER_LOCK:
        current = _WORKERS.get(kind)
        if current is None or not current.alive():
            if current is not None:
                current.close()
            _WORKERS[kind] = current = Worker(kind)
        return current


def worker_cpu_seconds() -> float:
    """CPU seconds this process's workers spent on jobs so far (added to a stage's cost)."""
    return sum(w.cpu for w in _WORKERS.values() if w.pid == os.getpid())


def shutdown() -> None:
    with _WORKER_LOCK:
        for w in _WORKERS.values():
            w.close()
        _WORKERS.clear()


def run_job(job: str, **args: Any) -> Any:
    """Run a job confined (in the worker), or here when this process is the worker or opted out."""
    if confined_here():
        return worker().request(job, **args)
    return JOBS[job](**args)


# --- worlds in the worker, and their stand-ins in the parent -------------------------------------------

_WORLDS: OrderedDict[str, Any] = OrderedDict()
_EPISODES: dict[int, Any] = {}


def _world_key(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def _job_open_world(files: dict[str, bytes], static: bool = True) -> str:
    from worldfactory.runtime.world import LOAD_CACHE, World

    key = _world_key(files) + ("" if static else "-nostatic")
    if key not in _WORLDS:
        _WORLDS[key] = World(files, static=static)
        while len(_WORLDS) > LOAD_CACHE:  # a whole range run's worlds, as the load caches keep
            _WORLDS.popitem(last=False)
    _WORLDS.move_to_end(key)
    return key


def _world(key: str) -> Any:
    try:
        return _WORLDS[key]
    except KeyError:
        raise ConfinementError("the confined worker no longer holds this world; open it again") from None


def _job_episode_open(world: str, task_id: str | None) -> int:
    ep = _world(world).episode(task_id)
    _EPISODES[id(ep)] = ep
    return id(ep)


def _episode(handle: int) -> Any:
    try:
        return _EPISODES[handle]
    except KeyError:
        raise ConfinementError("this episode is closed") from None


def _job_episode_call(handle: int, tool: str, args: Any) -> dict[str, Any]:
    step = _episode(handle).call(tool, args)
    return {"ok": step.ok, "result": step.result if step.ok else None, "error": step.error,
            "latency_us": step.latency_us, "result_json": step.result_json}


def _job_episode_verify(handle: int, answer: Any, explain: bool) -> dict[str, Any]:
    return _episode(handle).verify(answer, explain).model_dump(mode="json")


def _job_episode_diff(handle: int, canonical: bool) -> Any:
    return _episode(handle).diff(canonical)


def _job_episode_close(handle: int) -> None:
    ep = _EPISODES.pop(handle, None)
    if ep is not None:
        ep.close()


def _job_probes(files: dict[str, bytes]) -> dict[str, Any]:
    from worldfactory.runtime.world import World
    from worldfactory.sandbox import run_probes

    return run_probes(World(files))


def _job_ping() -> str:
    return "pong"


def _job_time_calls(world: str, tool: str, args: dict[str, Any], n: int) -> float:
    """Microseconds per call of one tool inside the worker (bench/sandbox_bench.py)."""
    with _world(world).episode() as ep:
        started = time.perf_counter()
        for _ in range(n):
            ep.call(tool, args)
        return (time.perf_counter() - started) / n * 1e6


# This layer's own jobs: worlds and episodes in the worker, the tool probes. The layers above register theirs
# (register_job: a build stage's step, a batch of rollouts); this module names none of them.
JOBS: dict[str, Callable[..., Any]] = {
    "open_world": _job_open_world, "episode_open": _job_episode_open, "episode_call": _job_episode_call,
    "episode_verify": _job_episode_verify, "episode_diff": _job_episode_diff, "episode_close": _job_episode_close,
    "probes": _job_probes, "ping": _job_ping, "time_calls": _job_time_calls}
_JOB_MODULES: dict[str, str] = {}  # a registered job: the module that registers it (the worker imports it)


def register_job(name: str, fn: Callable[..., Any], on_world: bool = False) -> None:
    """A layer above declares a job the worker runs: `fn(**args)`, its arguments and result plain data
    (the wire's). The worker imports fn's module on the job's first request, which registers it there
    too. With on_world, the job's `world` argument is a world the worker holds (RemoteWorld.run_job
    sends it): fn gets the World itself."""
    if name in JOBS and name not in _JOB_MODULES:
        raise ValueError(f"job {name!r} is the confine layer's own")

    def on(world: str, **args: Any) -> Any:
        return fn(world=_world(world), **args)

    JOBS[name] = on if on_world else fn
    _JOB_MODULES[name] = fn.__module__


def _job(msg: dict[str, Any]) -> Callable[..., Any]:
    """The function of a job the parent asked for: the worker's own, or one registered by the module named."""
    name = msg["job"]
    if name not in JOBS and isinstance(msg.get("module"), str) and msg["module"].startswith("worldfactory."):
        importlib.import_module(msg["module"])  # registers its jobs here too
    return JOBS[name]


class RemoteEpisode:
    """An episode that lives in the confined worker; calls, verdicts and diffs come back as data."""

    def __init__(self, world: RemoteWorld, task_id: str | None) -> None:
        self.world = world
        self.task = world.tasks[task_id] if task_id else None
        self.trace: list[Any] = []
        self._handle = world._worker.request("episode_open", world=world._key, task_id=task_id)
        self.closed = False
        from worldfactory import requester as req

        # The requester answers in the worker (scripted: a model cannot be reached from there); this one marks it.
        self.requester = req.ScriptedRequester(self.task) if self.task is not None and self.task.requester else None

    def tool_entries(self) -> list[dict[str, Any]]:
        """The episode's tools: the world's, and ask_requester where the task has a requester."""
        from worldfactory import requester as req

        extra = [req.ask_tool_entry(self.task)] if self.requester is not None and self.task is not None else []
        return [*self.world.tool_manifest, *extra]

    def ask(self, message: str) -> Any:
        """The trainer's channel to the requester, as Episode.ask."""
        return self.call("ask_requester", {"message": message})

    def call(self, tool: str, args: dict[str, Any] | None = None) -> Any:
        from worldfactory.runtime.episode import Step

        args = {} if args is None else args
        out = self.world._worker.request("episode_call", handle=self._handle, tool=tool, args=args)
        step = Step(ok=bool(out["ok"]), result=out["result"], error=out["error"], index=len(self.trace), tool=tool,
                    args=args if isinstance(args, dict) else {"_": args}, latency_us=float(out["latency_us"]))
        step._result_json = str(out["result_json"])
        self.trace.append(step)
        return step

    def verify(self, answer: Any = None, explain: bool = True) -> Any:
        from worldfactory.runtime.episode import Verdict

        return Verdict.model_validate(self.world._worker.request("episode_verify", handle=self._handle,
                                                                 answer=answer, explain=explain))

    def diff(self, canonical: bool = True) -> dict[str, Any]:
        return self.world._worker.request("episode_diff", handle=self._handle, canonical=canonical)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.world._worker.request("episode_close", handle=self._handle)

    def __enter__(self) -> RemoteEpisode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remote_world_class() -> type:
    from worldfactory.runtime.world import World

    class RemoteWorld(World):
        """A world's data here (tasks, manifests, verifiers); its tool code only in the confined worker."""

        def __init__(self, files: dict[str, bytes], path: Path | None = None, static: bool = True) -> None:
            super().__init__(files, path, code=False)
            self._worker = worker()
            self._key = self._worker.request("open_world", files=files, static=static)

        def episode(self, task_id: str | None = None) -> RemoteEpisode:  # type: ignore[override]
            if task_id:
                self.task(task_id)
            return RemoteEpisode(self, task_id)

        def run_job(self, job: str, **args: Any) -> Any:
            """A registered job (register_job with on_world) on this world's copy in the worker."""
            return self._worker.request(job, world=self._key, **args)

    return RemoteWorld


RemoteWorld: Any = None


def load_world(files: dict[str, bytes], path: Path | None = None, static: bool = True) -> Any:
    """A World whose generated code runs confined: a stand-in for the worker's copy, or the World itself."""
    global RemoteWorld
    if confined_here():
        if RemoteWorld is None:
            RemoteWorld = remote_world_class()
        return RemoteWorld(files, path, static=static)
    from worldfactory.runtime.world import World

    return World(files, path, static=static)


def open_world(path: str | Path, verify: bool = True, static: bool = True) -> Any:
    """World.open's checks (world.json, every file hash unless verify=False), then load_world."""
    from worldfactory.runtime.world import read_bundle

    root = Path(path)
    return load_world(read_bundle(root, verify), root, static=static)


# --- serve: the whole server process re-executed under the boundary ----------------------------------

SERVE_MODULES = ("worldfactory.runtime.mcp_server", "mcp.server.stdio", "uvicorn", "uvicorn.main",
                 "uvicorn.loops.auto", "uvicorn.loops.asyncio", "uvicorn.protocols.http.auto",
                 "uvicorn.protocols.http.h11_impl", "uvicorn.protocols.http.httptools_impl",
                 "uvicorn.protocols.websockets.auto", "uvicorn.lifespan.on", "uvicorn.lifespan.off",
                 "starlette.routing", "anyio._backends._asyncio", "sse_starlette", "worldfactory.sandbox",
                 "worldfactory.runtime.control", "worldfactory.runtime.mcp_http", "worldfactory.runtime.sessions",
                 "starlette.applications", "starlette.responses", "starlette.requests")

SERVE_OPEN_FILES = 8192  # an HTTP server holds a connection per client: 1,000 sessions need more than 1,024


def exec_confined(argv: list[str], pass_fds: tuple[int, ...] = (), open_files: int = OPEN_FILES) -> int:
    """Run `python -m worldfactory.cli ARGV` under the boundary in use; stdio passes through. Returns its exit code."""
    started = boundary.Started(boundary.choose(), ["-c", BOOT_CLI, ENGINE_ROOT, *argv], lambda: limits(open_files),
                               pass_fds=pass_fds)
    killed: list[int] = []

    def terminated(signum: int, _frame: Any) -> None:
        """SIGTERM: the server goes with this process, as it always did, and so does its scratch folder
        (Landlock's is a real folder, not bubblewrap's tmpfs); then this process ends by the signal."""
        killed.append(signum)
        started.proc.kill()

    in_main = threading.current_thread() is threading.main_thread()  # only there can a handler be set
    previous = signal.signal(signal.SIGTERM, terminated) if in_main else None
    try:
        return started.proc.wait()
    except KeyboardInterrupt:
        started.proc.send_signal(signal.SIGTERM)
        return started.proc.wait()
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        started.done()
        if killed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


# --- the worker's main loop --------------------------------------------------------------------------

def _serve_jobs() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    harden(preload=("worldfactory.stages.core", "worldfactory.generate.validity", "worldfactory.rollouts",
                    "worldfactory.policies.synthetic", "worldfactory.runtime.episode", "worldfactory.catalog",
                    "worldfactory.sandbox", "pyarrow.parquet"))
    send(out, "ready")
    while True:
        try:
            msg = receive(inp)
        except EOFError:
            return
        cpu0 = time.process_time()
        soft = int(cpu0) + JOB_CPU_SECONDS
        resource.setrlimit(resource.RLIMIT_CPU, (min(soft, CPU_HARD_SECONDS), CPU_HARD_SECONDS))
        try:
            result = _job(msg)(**msg["args"])
            reply = {"ok": True, "result": result}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as data
            if os.environ.get("WORLDFACTORY_DEBUG"):
                import traceback

                traceback.print_exc()
            reply = {"ok": False, "type": type(exc).__name__, "message": str(exc)[:8000]}
        reply["cpu"] = round(time.process_time() - cpu0, 6)
        try:
            send(out, reply)
        except (TypeError, ValueError) as exc:
            send(out, {"ok": False, "type": "ConfinementError", "message": f"unsendable result: {exc}"[:2000],
                       "cpu": reply["cpu"]})


def main() -> None:
    if os.environ.get(ENV_INSIDE) != "1":
        sys.exit("worldfactory.confine is the confined worker; it runs under an OS boundary only (worker())")
    _serve_jobs()

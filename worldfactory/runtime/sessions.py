"""Served episodes: one per MCP session or control-plane episode, each on its own copy of the seed.

A SessionStore holds the episodes of one world in one server process. Each is an Episode (a
transaction on its own pooled SQLite connection), so writes in one are never seen in another.
There are two kinds, each addressable only by its own kind's routes: free-form MCP sessions
(`/mcp`, the MCP session id is the episode id) and the control plane's episodes (the harness's;
their MCP sessions are bound to them at `/episodes/<id>/mcp`).

Capacity is bounded, because each episode holds its own copy of the seed in memory (about the
size of the start image plus 300 KiB): at most `max_sessions` episodes, of which at most
`max_free` free-form, so a flood of `/mcp` sessions always leaves the control plane room; and a
new episode is admitted only while the process has memory headroom under its limit (RLIMIT_AS,
what the confined server runs under). A full store raises `Full`, which the server answers 503
with `Retry-After`. An episode nobody has used for its kind's idle time (control plane: 24 hours;
free-form: 10 minutes) expires: its transaction is rolled back, its connection closed or pooled,
and its id answers 404 from then on. The clock is injectable, so expiry is testable without waiting.

Free-form MCP sessions keep no trace (their memory does not grow with the number of calls);
control-plane episodes keep a compact one (tool, arguments, and a hash of each result: what
`worldfactory replay` needs), never the results themselves; a call's arguments past
`TRACE_ARGS_BYTES` of JSON are kept as their sha256 and size only.
"""

from __future__ import annotations

import hashlib
import json
import resource
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worldfactory.runtime.episode import Episode, Step
from worldfactory.runtime.trace import TraceHeader, TraceStep, result_hash_json
from worldfactory.runtime.world import World

DEFAULT_IDLE_SECONDS = 24 * 3600.0  # a control-plane episode nobody used for this long expires
DEFAULT_FREE_IDLE_SECONDS = 600.0  # a free-form /mcp session: nobody holds its results, so it goes sooner
SERVED_CACHE_PAGES = 64  # page cache per served connection (SQLite's default is 2,000 KiB); the image is in memory
SESSION_OVERHEAD = 384 << 10  # a session's memory beyond its copy of the start image (measured: ~290 KiB)
MEMORY_SHARE = 0.5  # the default cap fills at most this share of the memory limit with sessions
DEFAULT_MEMORY_LIMIT = 8 << 30  # the confined server's address-space limit (confine.MEMORY_BYTES)
MAX_DEFAULT_SESSIONS = 4096
HEADROOM_RESERVE = 64 << 20  # admission keeps this much below the memory limit free for requests
TRACE_ARGS_BYTES = 16 << 10  # arguments larger than this (as JSON) are traced as sha256 and size
RETRY_AFTER_SECONDS = 30
ELIDED = "_elided_arguments"  # the key of a traced call whose arguments were too large to keep


class Full(OverflowError):
    """No room for another episode now; `retry_after` says when to try again (seconds)."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def memory_limit() -> int | None:
    """This process's address-space limit (RLIMIT_AS), or None when it has none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def memory_used() -> int:
    """This process's address space in bytes (what RLIMIT_AS counts)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def session_bytes(world: World) -> int:
    """What one served episode of this world costs in memory, about (see SESSION_OVERHEAD)."""
    return len(world.start_image) + SESSION_OVERHEAD


def default_max_sessions(world: World, limit: int | None = None) -> int:
    """A cap that fits MEMORY_SHARE of the memory limit with this world's sessions."""
    budget = (limit or memory_limit() or DEFAULT_MEMORY_LIMIT) * MEMORY_SHARE
    return max(8, min(MAX_DEFAULT_SESSIONS, int(budget // session_bytes(world))))


def traced_args(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as a trace keeps them: whole, or past TRACE_ARGS_BYTES their sha256 and size."""
    raw = json.dumps(args, sort_keys=True, default=str)
    if len(raw) <= TRACE_ARGS_BYTES:
        return args
    data = raw.encode()
    return {ELIDED: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}


@dataclass
class Served:
    """One served episode: its id, the task it runs (None: free-form) and its compact trace."""

    id: str
    task_id: str | None
    episode: Episode
    keep_trace: bool
    last_used: float
    calls: int = 0
    trace: list[TraceStep] = field(default_factory=list)
    answer: Any = None
    mcp_sessions: dict[str, None] = field(default_factory=dict)  # bound MCP session ids, oldest first

    @property
    def free(self) -> bool:
        """A free-form /mcp session (no trace); else the control plane's episode."""
        return not self.keep_trace

    @property
    def instruction(self) -> str:
        task = self.episode.task
        return task.instruction if task is not None else ""


class SessionStore:
    """The episodes one server holds, by id; thread-safe; bounded; idle ones expire."""

    def __init__(self, world: World, idle_seconds: float = DEFAULT_IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic, max_sessions: int | None = None,
                 free_idle_seconds: float = DEFAULT_FREE_IDLE_SECONDS, max_free: int | None = None,
                 memory_limit_bytes: int | None = None) -> None:
        if idle_seconds <= 0 or free_idle_seconds <= 0:
            raise ValueError("idle_seconds and free_idle_seconds must be positive")
        if max_sessions is not None and max_sessions < 1 or max_free is not None and max_free < 0:
            raise ValueError("max_sessions must be at least 1 and max_free at least 0")
        self.world = world
        self.idle_seconds = float(idle_seconds)
        self.free_idle_seconds = float(free_idle_seconds)
        self.clock = clock
        self.max_sessions = max_sessions if max_sessions is not None else default_max_sessions(world)
        self.max_free = min(self.max_sessions, max_free if max_free is not None else self.max_sessions // 2)
        self.memory_limit = memory_limit_bytes if memory_limit_bytes is not None else memory_limit()
        self.session_bytes = session_bytes(world)
        self._items: dict[str, Served] = {}
        self._free = 0  # how many of _items are free-form
        self._lock = threading.Lock()
        self._last_sweep = clock()
        self.expired = 0  # how many episodes expired so far
        self.refused = 0  # how many episodes were refused for want of room
        _lower_cache(world)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._items

    @property
    def free_count(self) -> int:
        return self._free

    def headroom(self) -> int | None:
        """Bytes left under the memory limit, or None when the process has no limit."""
        return None if self.memory_limit is None else self.memory_limit - memory_used()

    def _admit(self, free: bool) -> None:
        if len(self._items) >= self.max_sessions:
            raise Full(f"this server holds its maximum of {self.max_sessions} episodes; "
                       f"try again later, or end episodes you no longer need")
        if free and self._free >= self.max_free:
            raise Full(f"this server holds its maximum of {self.max_free} free-form MCP sessions; "
                       f"try again later (idle ones expire after {self.free_idle_seconds:g} s), "
                       f"or end sessions you no longer need (DELETE /mcp)")
        room = self.headroom()
        if room is not None and room < self.session_bytes + HEADROOM_RESERVE:
            raise Full(f"this server is near its memory limit ({self.memory_limit} bytes, "
                       f"{max(room, 0)} left); try again later")

    def open(self, task_id: str | None = None, keep_trace: bool = False) -> Served:
        """A new episode on a fresh copy of the seed (task_id must be one of the world's tasks).

        keep_trace=False is a free-form MCP session; True, the control plane's episode. Raises
        Full when there is no room (see the module doc).
        """
        if task_id is not None:
            self.world.task(task_id)
        self.maybe_sweep()
        free = not keep_trace
        with self._lock:
            try:
                self._admit(free)
            except Full:
                self.refused += 1
                raise
            served = Served(id=secrets.token_hex(16), task_id=task_id, episode=self.world.episode(task_id),
                            keep_trace=keep_trace, last_used=self.clock())
            self._items[served.id] = served
            self._free += free
        return served

    def _idle_limit(self, served: Served) -> float:
        return self.free_idle_seconds if served.free else self.idle_seconds

    def get(self, episode_id: str, free: bool | None = None) -> Served | None:
        """The live episode with this id (and it counts as used now), or None if unknown or expired.

        free=True finds only free-form MCP sessions, free=False only the control plane's episodes:
        an id of one kind is unknown to the other kind's routes.
        """
        served = self._items.get(episode_id)
        if served is None or (free is not None and served.free != free):
            return None
        now = self.clock()
        if now - served.last_used >= self._idle_limit(served):
            if self._drop(episode_id):
                self.expired += 1
            return None
        served.last_used = now
        return served

    def call(self, served: Served, tool: str, args: Any) -> Step:
        """One tool call in the episode; control-plane episodes record it in their trace."""
        step = served.episode.call(tool, args)
        served.episode.trace.clear()  # the store keeps what it needs; the episode keeps nothing
        if served.keep_trace:
            served.trace.append(TraceStep(index=served.calls, tool=tool, args=traced_args(step.args), ok=step.ok,
                                          result_sha256=result_hash_json(step.ok, step.result_json, step.error)))
        served.calls += 1
        served.last_used = self.clock()
        return step

    def reset(self, episode_id: str) -> Served | None:
        """A control-plane episode back at the seed state with the same task and id; the trace starts again."""
        served = self.get(episode_id, free=False)
        if served is None:
            return None
        fresh = self.world.episode(served.task_id)
        old, served.episode = served.episode, fresh
        served.trace.clear()
        served.calls = 0
        served.answer = None
        old.close()
        return served

    def close(self, episode_id: str) -> bool:
        """End an episode now: its connection goes back; its id answers 404 from then on."""
        return self._drop(episode_id)

    def _drop(self, episode_id: str) -> bool:
        with self._lock:
            served = self._items.pop(episode_id, None)
            if served is not None:
                self._free -= served.free
        if served is None:
            return False
        served.episode.close()
        return True

    def sweep(self) -> int:
        """Close every episode idle for its kind's idle time or more; returns how many."""
        now = self.clock()
        self._last_sweep = now
        stale = [k for k, s in list(self._items.items()) if now - s.last_used >= self._idle_limit(s)]
        n = sum(1 for k in stale if self._drop(k))
        self.expired += n
        return n

    @property
    def sweep_every(self) -> float:
        """How often expiry is checked: a hundredth of the shorter idle time, at most once a minute."""
        return max(0.05, min(60.0, self.idle_seconds / 100, self.free_idle_seconds / 100))

    def maybe_sweep(self) -> int:
        """sweep, at most once per sweep_every (cheap to call on every request)."""
        if self.clock() - self._last_sweep >= self.sweep_every:
            return self.sweep()
        return 0

    def close_all(self) -> None:
        for key in list(self._items):
            self._drop(key)

    def trace_jsonl(self, served: Served) -> str:
        """The episode's trace as JSON lines: a header, then one line per call (`worldfactory replay` reads it)."""
        header = TraceHeader(world_id=self.world.world_id, content_hash=self.world.content_hash,
                             task_id=served.task_id, policy="served", answer=served.answer)
        return "".join(line + "\n" for line in [header.model_dump_json(), *(s.model_dump_json() for s in served.trace)])


def _lower_cache(world: World) -> None:
    """Served connections keep a small page cache: the database is in memory already."""
    pool = getattr(world, "connections", None)
    if pool is not None and hasattr(pool, "pragmas"):
        pool.pragmas = (f"PRAGMA cache_size = {SERVED_CACHE_PAGES}",)

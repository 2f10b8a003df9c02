"""Served episodes: one per MCP session or control-plane episode, each on its own copy of the seed.

A SessionStore holds the episodes of one world in one server process. Each is an Episode (a
transaction on its own pooled SQLite connection), so writes in one are never seen in another.
An episode that nobody has used for `idle_seconds` (default 24 hours) expires: its transaction is
rolled back, its connection closed or pooled, and its id answers 404 from then on. The clock is
injectable, so expiry is testable without waiting.

Free-form MCP sessions keep no trace (their memory does not grow with the number of calls);
control-plane episodes keep a compact one (tool, arguments, and a hash of each result: what
`worldfactory replay` needs), never the results themselves.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worldfactory.runtime.episode import Episode, Step
from worldfactory.runtime.trace import TraceHeader, TraceStep, result_hash_json
from worldfactory.runtime.world import World

DEFAULT_IDLE_SECONDS = 24 * 3600.0
SERVED_CACHE_PAGES = 64  # page cache per served connection (SQLite's default is 2,000 KiB); the image is in memory


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
    mcp_sessions: set[str] = field(default_factory=set)

    @property
    def instruction(self) -> str:
        task = self.episode.task
        return task.instruction if task is not None else ""


class SessionStore:
    """The episodes one server holds, by id; thread-safe; idle ones expire."""

    def __init__(self, world: World, idle_seconds: float = DEFAULT_IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic, max_sessions: int | None = None) -> None:
        if idle_seconds <= 0:
            raise ValueError("idle_seconds must be positive")
        self.world = world
        self.idle_seconds = float(idle_seconds)
        self.clock = clock
        self.max_sessions = max_sessions
        self._items: dict[str, Served] = {}
        self._lock = threading.Lock()
        self._last_sweep = clock()
        self.expired = 0  # how many episodes expired so far
        _lower_cache(world)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._items

    def open(self, task_id: str | None = None, keep_trace: bool = False) -> Served:
        """A new episode on a fresh copy of the seed (task_id must be one of the world's tasks)."""
        if task_id is not None:
            self.world.task(task_id)
        self.maybe_sweep()
        if self.max_sessions is not None and len(self._items) >= self.max_sessions:
            raise OverflowError(f"this server holds its maximum of {self.max_sessions} episodes; delete some")
        served = Served(id=secrets.token_hex(16), task_id=task_id, episode=self.world.episode(task_id),
                        keep_trace=keep_trace, last_used=self.clock())
        with self._lock:
            self._items[served.id] = served
        return served

    def get(self, episode_id: str) -> Served | None:
        """The live episode with this id (and it counts as used now), or None if unknown or expired."""
        served = self._items.get(episode_id)
        if served is None:
            return None
        now = self.clock()
        if now - served.last_used >= self.idle_seconds:
            self._drop(episode_id)
            self.expired += 1
            return None
        served.last_used = now
        return served

    def call(self, served: Served, tool: str, args: Any) -> Step:
        """One tool call in the episode; control-plane episodes record it in their trace."""
        step = served.episode.call(tool, args)
        served.episode.trace.clear()  # the store keeps what it needs; the episode keeps nothing
        if served.keep_trace:
            served.trace.append(TraceStep(index=served.calls, tool=tool, args=step.args, ok=step.ok,
                                          result_sha256=result_hash_json(step.ok, step.result_json, step.error)))
        served.calls += 1
        served.last_used = self.clock()
        return step

    def reset(self, episode_id: str) -> Served | None:
        """Back to the seed state with the same task and id; the trace starts again."""
        served = self.get(episode_id)
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
        if served is None:
            return False
        served.episode.close()
        return True

    def sweep(self) -> int:
        """Close every episode idle for idle_seconds or more; returns how many."""
        now = self.clock()
        self._last_sweep = now
        stale = [k for k, s in list(self._items.items()) if now - s.last_used >= self.idle_seconds]
        n = sum(1 for k in stale if self._drop(k))
        self.expired += n
        return n

    def maybe_sweep(self) -> int:
        """sweep, at most once per hundredth of the idle time (cheap to call on every request)."""
        if self.clock() - self._last_sweep >= min(60.0, self.idle_seconds / 100):
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

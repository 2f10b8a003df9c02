"""Run one function over many items in worker processes, with progress events back to this process.

`worldfactory build --jobs N` builds worlds side by side with this: each worker is a fresh
(spawned) Python process that builds whole worlds, one at a time, so N worlds use N cores. The
engine-only path calls build_world in the workers; the Dagster path runs `world_build` in them
against the same on-disk instance. Workers report progress with `emit(...)`; the parent calls
`on_event` for each event and `on_result` for each finished item, all on its own thread, so a
progress bar can be driven from there.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

_EVENTS: Any = None  # the worker's end of the event queue (set by the pool initializer)
PR_SET_PDEATHSIG = 1  # prctl(2)


def default_jobs() -> int:
    """One worker per core."""
    return max(1, os.cpu_count() or 1)


def emit(*event: Any) -> None:
    """Send a progress event to the parent process (nothing happens outside a worker)."""
    if _EVENTS is not None:
        _EVENTS.put(event)


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the process that started it dies (killed, crashed).

    Without it a killed `worldfactory build` leaves its workers building on, unseen. Their
    unfinished worlds are never published (a bundle appears only by its final rename), and the
    next build marks their Dagster runs failed (pipelines.runner.fail_dead_runs).
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the call: nobody is left to report to
            os._exit(1)


def _init(events: Any, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    global _EVENTS
    _die_with_parent()
    # A stopped build SIGTERMs its workers (_stop_workers): as KeyboardInterrupt, so the item's own cleanup
    # (build_world removes its work folder) runs before the worker exits.
    signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGINT) if callable(signal.getsignal(signal.SIGINT))
                  else signal.default_int_handler)
    _EVENTS = events
    if initializer is not None:
        initializer(*initargs)


def _drain(events: Any, on_event: Callable[..., None], wait_s: float = 0.0) -> None:
    while True:
        try:
            event = events.get(timeout=wait_s) if wait_s else events.get_nowait()
        except queue.Empty:
            return
        on_event(*event)


STOP_GRACE_S = 3.0  # how long stopped workers have to report their runs failed before they are killed
# (a killed worker's run is failed by the parent: pipelines.runner.fail_dead_runs)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM each worker, so the item it is on ends now (a Dagster run turns it into a failed run), not
    when it would have finished; SIGKILL any still there after STOP_GRACE_S. The pool keeps its processes
    in a private field: concurrent.futures has no public way to end the items already running."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)  # then no next item: each worker exits after its current one
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def run_in_processes(fn: Callable[[Any], Any], items: Iterable[Any], jobs: int,
                     on_result: Callable[[Any, Any, BaseException | None], None],
                     on_event: Callable[..., None] = lambda *event: None,
                     initializer: Callable[..., None] | None = None, initargs: tuple[Any, ...] = ()) -> None:
    """Call fn(item) for every item in up to `jobs` spawned worker processes.

    on_result(item, result, error) runs in this process as each item finishes (error is the
    exception fn raised, or the pool's own error when a worker died). `fn` and `initializer` must
    be importable module-level functions. Processes are spawned, not forked: a fork would copy
    open database handles and threads of this process into the workers.
    """
    todo = list(items)
    if not todo:
        return
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo))), mp_context=ctx, initializer=_init,
                             initargs=(events, initializer, initargs)) as pool:
        pending: dict[Future[Any], Any] = {pool.submit(fn, item): item for item in todo}
        try:
            while pending:
                done, _ = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                _drain(events, on_event)
                for future in done:
                    item = pending.pop(future)
                    error = future.exception()
                    on_result(item, None if error is not None else future.result(), error)
        except BaseException:  # stopped (SIGINT, SIGTERM): the workers stop too, promptly
            _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    # The workers have exited, so every event they put is in the pipe now (a queue's put is flushed by a
    # feeder thread, and a result can overtake it): drain after the pool is gone, not before.
    _drain(events, on_event, wait_s=0.05)

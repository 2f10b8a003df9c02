"""An episode: a private in-memory copy of the seed, atomic tool calls, a trace and a verdict.

Reset is `deserialize` of the seed bytes into a fresh connection. Every call is validated
against the tool's JSON schema, then runs inside a SAVEPOINT that is rolled back whole if the
tool fails, so a failed call changes nothing. Reset and verify belong to the harness, not to
the agent: they are methods here and never tools.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from worldfactory.runtime.answers import answers_match, normalize_answer
from worldfactory.runtime.diff import Mismatch, compare, digest, state_diff
from worldfactory.runtime.toolkit import ToolDB, ToolError
from worldfactory.spec import Task

if TYPE_CHECKING:
    from worldfactory.runtime.world import World

WRITE_ACTIONS = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
DENIED_ACTIONS = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH}


class CallResult(BaseModel):
    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = None


class Step(BaseModel):
    index: int
    tool: str
    args: dict[str, Any]
    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = None
    latency_us: float = 0.0


class Verdict(BaseModel):
    passed: bool
    reward: float
    answer_ok: bool | None = None
    mismatches: list[Mismatch] = Field(default_factory=list)


def schema_message(tool: str, errors: list[Any]) -> str:
    parts = []
    for e in errors:
        where = ".".join(str(p) for p in e.absolute_path)
        parts.append(f"{where}: {e.message}" if where else e.message)
    return f"invalid arguments for {tool}: " + "; ".join(parts)


class Episode:
    """One run of one task (or a free-form session) on its own copy of the seed."""

    def __init__(self, world: World, task: Task | None = None) -> None:
        self.world = world
        self.task = task
        self.trace: list[Step] = []
        self.written: set[str] = set()
        self._lock = threading.Lock()
        self._allow_attach = False
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.conn.deserialize(world.seed_image)
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.set_authorizer(self._authorize)
        self._db = ToolDB(self.conn, world.clock)

    def _authorize(self, action: int, arg1: str | None, *_: Any) -> int:
        if action in WRITE_ACTIONS and arg1:
            self.written.add(arg1)
        if action in DENIED_ACTIONS and not self._allow_attach:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def call(self, tool: str, args: dict[str, Any] | None = None) -> CallResult:
        """Run one tool call atomically; a failure returns an error and changes nothing."""
        started = time.perf_counter()
        args = {} if args is None else args
        result = self._call(tool, args)
        step = Step(index=len(self.trace), tool=tool, args=args if isinstance(args, dict) else {"_": args},
                    ok=result.ok, result=result.result, error=result.error,
                    latency_us=round((time.perf_counter() - started) * 1e6, 1))
        self.trace.append(step)
        return result

    def _call(self, tool: str, args: Any) -> CallResult:
        fn = self.world.functions.get(tool)
        if fn is None:
            return CallResult(ok=False, error=f"unknown tool '{tool}'; list the tools to see what this world offers")
        if not isinstance(args, dict):
            return CallResult(ok=False, error=f"invalid arguments for {tool}: expected a JSON object")
        errors = sorted(self.world.validators[tool].iter_errors(args), key=lambda e: list(e.absolute_path))
        if errors:
            return CallResult(ok=False, error=schema_message(tool, errors))
        with self._lock:
            self.conn.execute("SAVEPOINT tool_call")
            try:
                out = fn(self._db, **args)
                text = json.dumps(out, default=str)
            except ToolError as exc:
                self._undo()
                return CallResult(ok=False, error=f"{tool} refused: {exc}")
            except sqlite3.Error as exc:
                self._undo()
                return CallResult(ok=False, error=f"{tool} failed in the database: {exc}")
            except Exception as exc:  # a bug in generated code must not leave partial writes
                self._undo()
                return CallResult(ok=False, error=f"{tool} failed: {type(exc).__name__}: {exc}")
            self.conn.execute("RELEASE tool_call")
        return CallResult(ok=True, result=json.loads(text))

    def _undo(self) -> None:
        self.conn.execute("ROLLBACK TO tool_call")
        self.conn.execute("RELEASE tool_call")

    def snapshot(self) -> bytes:
        """The episode's current database bytes (for byte-identical checks)."""
        with self._lock:
            return self.conn.serialize()

    def restore(self, image: bytes, written: set[str]) -> None:
        """Continue from another database image of this world (harness use: replaying from a checkpoint).

        `written` must cover every table the image changed against the seed, so diffs stay complete.
        """
        with self._lock:
            self._allow_attach = True
            try:
                self.conn.deserialize(image)
            finally:
                self._allow_attach = False
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.written |= written

    @contextmanager
    def attached(self, name: str, image: bytes) -> Iterator[sqlite3.Connection]:
        """The episode's connection with another database image attached as `name` (harness use only)."""
        with self._lock:
            self._allow_attach = True
            self.conn.execute(f"ATTACH DATABASE ':memory:' AS {name}")
            try:
                self.conn.deserialize(image, name=name)
                yield self.conn
            finally:
                self.conn.execute(f"DETACH DATABASE {name}")
                self._allow_attach = False

    def diff(self) -> dict[str, Any]:
        """Normalised changes against the seed, over every table that was written."""
        with self._lock:
            self._allow_attach = True
            try:
                self.conn.execute("ATTACH DATABASE ':memory:' AS seed")
                self.conn.deserialize(self.world.seed_image, name="seed")
                return state_diff(self.conn, self.world.norm, sorted(self.written & set(self.world.norm)))
            finally:
                self.conn.execute("DETACH DATABASE seed")
                self._allow_attach = False

    def verify(self, answer: Any = None) -> Verdict:
        """Grade the end state (and answer) against the task's gold; reward is 1 or 0."""
        if self.task is None:
            raise ValueError("this episode has no task to verify; open it with world.episode(task_id)")
        gold = self.world.verifiers.get("tasks", {}).get(self.task.task_id)
        if gold is None:
            raise ValueError(f"no verifier for task {self.task.task_id}; rebuild the world")
        got = self.diff()
        mismatches = [] if digest(got) == gold["digest"] else compare(gold["diff"], got)
        answer_ok: bool | None = None
        if self.task.answer is not None:
            answer_ok = answers_match(self.task.answer, answer, self.task.answer_type)
            if not answer_ok:
                mismatches.append(Mismatch(table="<answer>", key=self.task.task_id, column="answer",
                                           expected=normalize_answer(self.task.answer, self.task.answer_type),
                                           got=normalize_answer(answer, self.task.answer_type)))
        passed = not mismatches
        return Verdict(passed=passed, reward=1.0 if passed else 0.0, answer_ok=answer_ok, mismatches=mismatches)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""An episode: a private in-memory copy of the seed, atomic tool calls, a trace and a verdict.

Reset is `deserialize` of the seed bytes into a fresh connection. Every call is validated
against the tool's JSON schema, then runs inside a SAVEPOINT that is rolled back whole if the
tool fails, so a failed call changes nothing. Reset and verify belong to the harness, not to
the agent: they are methods here and never tools.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, PrivateAttr

from worldfactory import requester as req
from worldfactory.runtime.answers import answers_match, normalize_answer
from worldfactory.runtime.connections import tables_written
from worldfactory.runtime.diff import CHANGES_TABLE, Mismatch, compare, digest, same_diff
from worldfactory.runtime.toolkit import ToolDB, ToolError
from worldfactory.spec import Task

if TYPE_CHECKING:
    from worldfactory.runtime.world import World

class CallResult(BaseModel):
    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = None


class Step(CallResult):
    """A call as the trace keeps it; Episode.call returns it (it is the call's result too)."""

    index: int
    tool: str
    args: dict[str, Any]
    latency_us: float = 0.0
    _result_json: str | None = PrivateAttr(default=None)  # the result as canonical JSON, made once per call

    @property
    def result_json(self) -> str:
        """The result as json.dumps(result, sort_keys=True, default=str): what traces store and hash."""
        private = self.__pydantic_private__  # read directly: pydantic's attribute hook costs more than the lookup
        text = private.get("_result_json")
        if text is None:
            text = private["_result_json"] = json.dumps(self.result, sort_keys=True, default=str)
        return text


class Verdict(BaseModel):
    passed: bool
    reward: float
    answer_ok: bool | None = None
    mismatches: list[Mismatch] = Field(default_factory=list)


_STEP_FIELDS = frozenset(Step.model_fields)


def _step(values: dict[str, Any], result_json: str) -> Step:
    """A Step from values the episode has already checked, without pydantic's validation.

    What model_construct does, minus its generality: a step is made for every tool call, and
    this is a fifth of model_construct's cost. Sets exactly the instance state pydantic 2 keeps.
    """
    step = object.__new__(Step)
    object.__setattr__(step, "__dict__", values)
    object.__setattr__(step, "__pydantic_fields_set__", _STEP_FIELDS)
    object.__setattr__(step, "__pydantic_extra__", None)
    object.__setattr__(step, "__pydantic_private__", {"_result_json": result_json})
    return step


class CanonicalJSON:
    """json.dumps(value, sort_keys=True, default=str) as one reusable encoder, noting values it converts.

    The same text as json.dumps, byte for byte, without building an encoder for every call (a
    third of the cost of encoding a tool's small result). `converted` says whether a value JSON
    cannot hold was written as its str(); a caller then reads the text back, so what it hands on
    equals what the trace keeps. One instance per episode: not for concurrent use.
    """

    def __init__(self) -> None:
        self.converted = False
        self._markers: dict[int, Any] = {}  # json's circular-reference check, emptied again after each use
        self._fallback = json.JSONEncoder(sort_keys=True, default=self._default)
        self._encode: Callable[[Any, int], Any] | None = None
        if c_make_encoder is not None:  # CPython's C encoder, exactly as JSONEncoder.encode builds it
            self._encode = c_make_encoder(self._markers, self._default, encode_basestring_ascii, None,
                                          ": ", ", ", True, False, True)

    def _default(self, value: Any) -> str:
        self.converted = True
        return str(value)

    def __call__(self, value: Any) -> str:
        self.converted = False
        if self._encode is None or isinstance(value, str):
            return self._fallback.encode(value)
        try:
            return "".join(self._encode(value, 0))
        finally:
            self._markers.clear()


QUOTE_CHARS = 40  # an error message quotes at most this much of a bad value
MESSAGE_CHARS = 1000  # and is at most this long


def short(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters in all)"


def _error_text(e: Any) -> str:
    message = e.message
    values = [e.instance, *e.instance] if isinstance(e.instance, dict) else [e.instance]  # unknown keys are named
    for value in values:
        quoted = repr(value)
        if len(quoted) > QUOTE_CHARS + 10 and quoted in message:
            message = message.replace(quoted, f"{quoted[:QUOTE_CHARS]}... ({len(quoted)} characters)")
    return short(message, 300)


def schema_message(tool: str, errors: list[Any]) -> str:
    parts = []
    for e in errors[:10]:
        where = short(".".join(str(p) for p in e.absolute_path), 100)
        text = _error_text(e)
        parts.append(f"{where}: {text}" if where else text)
    return short(f"invalid arguments for {tool}: " + "; ".join(parts))


class Episode:
    """One run of one task (or a free-form session) on its own copy of the seed."""

    def __init__(self, world: World, task: Task | None = None) -> None:
        self.world = world
        self.task = task
        self.trace: list[Step] = []
        self._lock = threading.Lock()
        self._session = world.connections.acquire()
        self.conn = self._session.conn
        self._session.run("BEGIN")
        self._db = ToolDB(self.conn, world.clock)
        self._json = CanonicalJSON()
        self.closed = False
        # The task's requester, when it has facts to give (requester.py); a harness may swap in a ModelRequester.
        self.requester: req.Requester | None = req.ScriptedRequester(task) if task is not None and task.requester \
            else None

    def tool_entries(self) -> list[dict[str, Any]]:
        """The tools this episode offers, as tools.json declares them: the world's, and ask_requester where
        the task has a requester (its topics as an enum)."""
        extra = [req.ask_tool_entry(self.task)] if self.requester is not None and self.task is not None else []
        return [*self.world.tool_manifest, *extra]

    def ask(self, message: str) -> Step:
        """The trainer's channel: a free-form message to the requester, kept in the trace as an ask call."""
        return self.call(req.ASK_TOOL, {"message": message})

    @property
    def written(self) -> set[str]:
        """The world tables this episode has changed (the change log names them)."""
        with self._lock:
            self._live()
            return tables_written(self.conn) & set(self.world.norm)

    def _live(self) -> None:
        if self.closed:
            raise RuntimeError("this episode is closed; its connection went back to the world's pool")

    def call(self, tool: str, args: dict[str, Any] | None = None) -> Step:
        """Run one tool call atomically; a failure returns an error and changes nothing."""
        started = time.perf_counter()
        args = {} if args is None else args
        result, error, text = self._call(tool, args)
        step = _step({"ok": error is None, "result": result, "error": error, "index": len(self.trace), "tool": tool,
                      "args": args if isinstance(args, dict) else {"_": args},
                      "latency_us": round((time.perf_counter() - started) * 1e6, 1)}, text)
        self.trace.append(step)
        return step

    def _call(self, tool: str, args: Any) -> tuple[dict[str, Any] | None, str | None, str]:
        """(result, None, result as canonical JSON) or (None, error, "null")."""
        if self.closed:
            return None, "this episode is closed; start a new one", "null"
        fn = self.world.functions.get(tool)
        if fn is None and tool == req.ASK_TOOL and self.requester is not None and self.task is not None:
            return self._ask(args)
        if fn is None:
            name = short(str(tool), QUOTE_CHARS)
            return None, f"unknown tool {name!r}; list the tools to see what this world offers", "null"
        if not isinstance(args, dict):
            return None, f"invalid arguments for {tool}: expected a JSON object", "null"
        error = self.world.argument_error(tool, args)
        if error is not None:
            return None, error, "null"
        session = self._session
        with self._lock:
            session.run(session.savepoint)
            try:
                out = fn(self._db, **args)
                text = self._json(out)
            except ToolError as exc:
                self._undo()
                return None, short(f"{tool} refused: {exc}"), "null"
            except sqlite3.Error as exc:
                self._undo()
                return None, short(f"{tool} failed in the database: {exc}"), "null"
            except Exception as exc:  # a bug in generated code must not leave partial writes
                self._undo()
                return None, short(f"{tool} failed: {type(exc).__name__}: {exc}"), "null"
            session.run(session.release)
        if self._json.converted or not isinstance(out, dict):  # values JSON cannot hold: the client sees them as text
            out = json.loads(text)
        return out, None, text

    def _ask(self, args: Any) -> tuple[dict[str, Any] | None, str | None, str]:
        """An ask call: no database, no savepoint; the answer or the argument error."""
        assert self.task is not None and self.requester is not None
        error = req.argument_error(self.task, args)
        if error is not None:
            return None, error, "null"
        try:
            out = req.ask(self.requester, args)
        except Exception as exc:  # a model-backed requester that cannot be reached changes nothing
            return None, short(f"{req.ASK_TOOL} failed: {type(exc).__name__}: {exc}"), "null"
        with self._lock:
            text = self._json(out)
        return out, None, text

    def _undo(self) -> None:
        self._session.run(self._session.undo)
        self._session.run(self._session.release)

    def snapshot(self) -> bytes:
        """A hash of every table's rows, change log included: equal snapshots mean equal states.

        Read from the tables rather than `serialize`, which cannot see the episode's open
        transaction. It reads the whole database; state_key is the cheap test for "did anything change".
        """
        with self._lock:
            self._live()
            names = [r[0] for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            digest = hashlib.sha256()
            for name in names:
                digest.update(f"\0{name}\0".encode())
                for row in self.conn.execute(f"SELECT * FROM {name} ORDER BY 1, 2"):
                    digest.update(repr(row).encode())
            return digest.hexdigest().encode()

    def state_key(self) -> str:
        """A hash of the change log and the rows it names: equal keys mean the same changes to the seed."""
        diff = self.diff()
        with self._lock:
            logged = list(self.conn.execute(f"SELECT tbl, id FROM {CHANGES_TABLE} ORDER BY tbl, id"))
        return hashlib.sha256(repr((logged, digest(diff))).encode()).hexdigest()

    def checkpoint(self, name: str) -> None:
        """Mark the current state, to come back to it with rewind (harness use: mutants of an oracle)."""
        with self._lock:
            self._live()
            self._session.run(f"SAVEPOINT cp_{name}")

    def rewind(self, name: str) -> None:
        """Back to a checkpoint, which stays; checkpoints made after it are gone."""
        with self._lock:
            self._live()
            self._session.run(f"ROLLBACK TO cp_{name}")

    def diff(self, canonical: bool = True) -> dict[str, Any]:
        """Normalised changes against the seed: the rows the change log names, compared with the seed's."""
        with self._lock:
            self._live()
            return self.world.differ.diff(self.conn, canonical)

    def verify(self, answer: Any = None, explain: bool = True) -> Verdict:
        """Grade the end state (and answer) against the task's gold; reward is 1 or 0.

        explain=False leaves out the itemised state mismatches of a failed episode (rollouts only
        need the reward, and a failed 1,000-call task has thousands).
        """
        if self.task is None:
            raise ValueError("this episode has no task to verify; open it with world.episode(task_id)")
        gold = self.world.verifiers.get("tasks", {}).get(self.task.task_id)
        if gold is None:
            raise ValueError(f"no verifier for task {self.task.task_id}; rebuild the world")
        if not self._session.intact():
            raise PermissionError("this episode's database guard was removed by tool code; it cannot be graded")
        bags = self.world.gold_bags(self.task.task_id)
        if explain:
            got = self.diff(canonical=False)
            mismatches = [] if same_diff(gold["diff"], got, bags) else compare(gold["diff"], got)
        else:  # the reward alone: stop at the first table that differs
            with self._lock:
                self._live()
                same = self.world.differ.matches(self.conn, gold["diff"], bags)
            mismatches = [] if same else [Mismatch(table="*", key="*", column="*", expected="the gold end state",
                                                   got="a different end state")]
        answer_ok: bool | None = None
        if self.task.answer is not None:
            answer_ok = answers_match(self.task.answer, answer, self.task.answer_type, self.world.rule_refs)
            if not answer_ok:
                mismatches.append(Mismatch(table="<answer>", key=self.task.task_id, column="answer",
                                           expected=normalize_answer(self.task.answer, self.task.answer_type),
                                           got=normalize_answer(answer, self.task.answer_type)))
        passed = not mismatches
        return Verdict(passed=passed, reward=1.0 if passed else 0.0, answer_ok=answer_ok, mismatches=mismatches)

    def close(self) -> None:
        """Hand the connection back to the world's pool; the episode cannot be used after this."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                self._session.run("ROLLBACK")
            finally:
                self.world.connections.release(self._session)

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

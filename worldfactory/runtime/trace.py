"""Traces: a recorded episode as JSONL (a header, then one line per step), and its replay on fresh state.

A trace records the world's content hash, so replaying it against another version of the world
is refused instead of silently disagreeing. Each step carries a hash of its result; a replay
reports, step by step, whether the same call on the same state gave the same result.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from worldfactory.runtime.episode import Step
from worldfactory.runtime.world import World, WorldError

TRACE_FORMAT = "worldfactory-trace/1"


class TraceError(ValueError):
    """A trace file that cannot be read, or that belongs to another world version."""


class TraceHeader(BaseModel):
    format: str = TRACE_FORMAT
    world_id: str
    content_hash: str
    task_id: str | None = None
    policy: str = ""
    answer: Any = None


class TraceStep(BaseModel):
    index: int
    tool: str
    args: dict[str, Any]
    ok: bool
    result_sha256: str


class StepCheck(BaseModel):
    index: int
    tool: str
    recorded: str
    replayed: str

    @property
    def identical(self) -> bool:
        return self.recorded == self.replayed


class ReplayReport(BaseModel):
    world_id: str
    task_id: str | None
    steps: list[StepCheck]
    reward: float | None = None

    @property
    def identical(self) -> bool:
        return all(s.identical for s in self.steps)


def result_hash(ok: bool, result: Any, error: str | None) -> str:
    return result_hash_json(ok, json.dumps(result, sort_keys=True, default=str), error)


def result_hash_json(ok: bool, result_json: str, error: str | None) -> str:
    """result_hash from the result's canonical JSON, when the caller has it already.

    The bytes hashed are those of json.dumps({"ok", "result", "error"}, sort_keys=True): keys in
    sorted order, the result's own JSON in its place.
    """
    err = "null" if error is None else json.dumps(error)
    raw = f'{{"error": {err}, "ok": {"true" if ok else "false"}, "result": {result_json}}}'
    return hashlib.sha256(raw.encode()).hexdigest()


def trace_lines(world: World, steps: list[Step], task_id: str | None, policy: str, answer: Any = None) -> str:
    header = TraceHeader(world_id=world.world_id, content_hash=world.content_hash, task_id=task_id, policy=policy,
                         answer=answer)
    lines = [header.model_dump_json()]
    for s in steps:
        lines.append(TraceStep(index=s.index, tool=s.tool, args=s.args, ok=s.ok,
                               result_sha256=result_hash(s.ok, s.result, s.error)).model_dump_json())
    return "".join(line + "\n" for line in lines)


def write_trace(path: Path, world: World, steps: list[Step], task_id: str | None, policy: str,
                answer: Any = None) -> None:
    path.write_text(trace_lines(world, steps, task_id, policy, answer))


def read_trace(path: Path) -> tuple[TraceHeader, list[TraceStep]]:
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None
    if not lines:
        raise TraceError(f"{path}: empty trace file")
    try:
        header = TraceHeader.model_validate_json(lines[0])
        steps = [TraceStep.model_validate_json(line) for line in lines[1:]]
    except ValueError as exc:
        raise TraceError(f"{path}: not a WorldFactory trace ({exc.__class__.__name__}: {str(exc)[:300]})") from None
    if header.format != TRACE_FORMAT:
        raise TraceError(f"{path}: trace format '{header.format}', this version reads '{TRACE_FORMAT}'")
    return header, steps


def replay(world: World, header: TraceHeader, steps: list[TraceStep]) -> ReplayReport:
    """Run the recorded calls on a fresh copy of the seed and compare every result."""
    if header.world_id != world.world_id or header.content_hash != world.content_hash:
        raise TraceError(
            f"the trace was recorded against {header.world_id} version {header.content_hash[:12]}, but this world is "
            f"{world.world_id} version {world.content_hash[:12]}; replay it against the bundle it was recorded on "
            f"(--world PATH), or record a new trace")
    if header.task_id is not None and header.task_id not in world.tasks:
        raise WorldError(f"world {world.world_id} has no task '{header.task_id}'")
    checks = []
    with world.episode(header.task_id) as ep:
        for s in steps:
            res = ep.call(s.tool, s.args)
            checks.append(StepCheck(index=s.index, tool=s.tool, recorded=s.result_sha256,
                                    replayed=result_hash(res.ok, res.result, res.error)))
        reward = ep.verify(header.answer).reward if header.task_id else None
    return ReplayReport(world_id=world.world_id, task_id=header.task_id, steps=checks, reward=reward)

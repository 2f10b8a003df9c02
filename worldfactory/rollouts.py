"""Rollouts and pass-band filtering: k episodes per task with a policy, then keep the tasks that split.

Episodes run concurrently under asyncio, each on its own in-memory copy of the seed. Synthetic
policies are seeded per (world, task, rollout), so their pass rates, and the curated task list
cut from them, are reproducible. A noisy episode's calls are drawn before it runs, and one that
makes the same calls and answer as an earlier episode of its task (most often the oracle's own,
no step gone wrong) takes that episode's trace and verdict instead of running again: the same
calls on the same seed give the same results. Tasks every rollout passes or every rollout fails
carry no learning signal and are dropped.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import time
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel, Field

from worldfactory import confine
from worldfactory.policies.base import EpisodeResult, RolloutError, episode_seed, run_policy
from worldfactory.policies.synthetic import noisy_plan
from worldfactory.runtime.episode import Step
from worldfactory.runtime.trace import result_hash, result_hash_json
from worldfactory.runtime.world import World
from worldfactory.spec import Task

BUCKETS = ("0", "(0,0.25]", "(0.25,0.5]", "(0.5,0.75]", "(0.75,1)", "1")


class RolloutConfig(BaseModel):
    """Which policy plays the tasks, how many times, and (for a model) where it is served."""

    policy: str = "noisy"
    k: int = Field(default=8, ge=1, le=1000)
    error_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    concurrency: int = Field(default=32, ge=1, le=1024)
    base_url: str = ""
    model: str = ""
    api_key: str = "unused"
    max_turns: int = Field(default=40, ge=1)
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    request_retries: int = Field(default=2, ge=0, le=10)
    seed: int = Field(default=0, ge=0)  # 0: the build's episode seeds; another value draws other episodes

    @property
    def label(self) -> str:
        if self.policy == "noisy":
            return f"noisy-{self.error_rate:g}"
        if self.policy == "openai":
            return f"openai-{self.model}"
        return self.policy

    @property
    def needs_network(self) -> bool:
        """Whether the policy calls a server (a model's): it runs outside the confined worker, which has no
        network, and only its episodes' tool calls run inside."""
        return self.policy == "openai"


class Rollout(BaseModel):
    world_id: str
    task_id: str
    family: str
    policy: str
    rollout: int
    seed: int
    reward: float
    steps: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    trace: list[Step] = Field(default_factory=list)
    answer: Any = None  # what the policy answered: evaluation runs keep it, bundles and catalogs do not


def _rollout(world: World, task_id: str, i: int, result: EpisodeResult, label: str) -> Rollout:
    return Rollout(world_id=world.world_id, task_id=task_id, family=world.tasks[task_id].family, policy=label,
                   rollout=i, seed=result.seed, reward=result.verdict.reward, steps=result.steps,
                   prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                   cost_usd=result.cost_usd, seconds=result.seconds, trace=result.trace, answer=result.answer)


async def run_rollouts_async(world: World, cfg: RolloutConfig, task_ids: list[str] | None = None,
                             on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
    """k rollouts of every task (or of task_ids), at most cfg.concurrency at once, in a stable order."""
    ids = task_ids if task_ids is not None else list(world.tasks)
    jobs = [(tid, i) for tid in ids for i in range(cfg.k)]
    gate = asyncio.Semaphore(cfg.concurrency)
    agent = None
    if cfg.policy == "openai":
        from worldfactory.policies.openai_agent import ChatAgent

        agent = ChatAgent(world, cfg)

    runs: dict[str, dict[str, EpisodeResult]] = {}  # each task's distinct noisy episodes, run on its first rollout

    async def one(tid: str, i: int) -> Rollout:
        seed = episode_seed(world, tid, i, cfg.seed)
        async with gate:
            if agent is not None:
                result = await agent.run(tid, seed)
            elif cfg.policy == "noisy":
                result = _noisy_episode(world, tid, seed, cfg, runs)
                await asyncio.sleep(0)
            else:
                result = run_policy(world, tid, cfg.policy, seed=seed, name=cfg.label, error_rate=cfg.error_rate,
                                    explain=False)
                await asyncio.sleep(0)  # let other episodes and the progress bar move
        r = _rollout(world, tid, i, result, cfg.label)
        if on_done is not None:
            on_done(r)
        return r

    try:
        return list(await asyncio.gather(*(one(tid, i) for tid, i in jobs)))
    finally:
        if agent is not None:
            await agent.close()


def _noisy_episode(world: World, task_id: str, seed: int, cfg: RolloutConfig,
                   runs: dict[str, dict[str, EpisodeResult]]) -> EpisodeResult:
    """One noisy episode: the first of a task runs all k of its distinct episodes (noisy_task), the rest
    take theirs. Each comes back with its own seed; `seconds` is the time to look it up (and for the
    first, to run the task's episodes)."""
    started = time.perf_counter()
    done = runs.get(task_id)
    if done is None:
        seeds = [episode_seed(world, task_id, i, cfg.seed) for i in range(cfg.k)]
        done = runs[task_id] = noisy_task(world, world.tasks[task_id], seeds, cfg)
    return done[seed].model_copy(update={"seed": seed, "seconds": round(time.perf_counter() - started, 6)})


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def noisy_task(world: World, task: Task, seeds: list[int], cfg: RolloutConfig) -> dict[int, EpisodeResult]:
    """The noisy episode of each of a task's seeds, the distinct ones run on one episode (seeds that draw
    the same calls and answer share one result, which carries the first such seed).

    The noisy policy never reads a result, so every episode's calls are drawn first. Episodes that
    make the same calls and answer run once; the rest run in sorted order of their calls, as a walk
    of the tree of their common prefixes: a shared prefix runs once, and each episode goes back to
    the checkpoint (a SAVEPOINT) where it leaves the one before it and runs only its own tail. The
    same calls on the same state give the same results, so every trace is what a fresh run of its
    seed records (tests/test_rollouts.py holds every rollout to that).
    """
    drawn: dict[str, tuple[list[str], list[tuple[str, dict[str, Any]]], Any, int]] = {}
    key_of: dict[int, str] = {}
    for seed in seeds:
        calls, answer = noisy_plan(task, random.Random(seed), cfg.error_rate)
        key = key_of[seed] = dumps_sorted([calls, answer])
        if key not in drawn:
            drawn[key] = ([dumps_sorted(c) for c in calls], calls, answer, seed)
    order = sorted(drawn, key=lambda k: (drawn[k][0], k))
    shared = [_common_prefix(drawn[a][0], drawn[b][0]) for a, b in zip(order, order[1:], strict=False)]
    marks = {0, *shared}  # the depths some later episode goes back to
    out: dict[str, EpisodeResult] = {}
    with world.episode(task.task_id) as ep:
        path: list[int] = []  # the depths that have a checkpoint on the current path, ascending
        trace: list[Step] = []
        for j, key in enumerate(order):
            started = time.perf_counter()
            _, calls, answer, seed = drawn[key]
            base = shared[j - 1] if j else 0
            while path and path[-1] > base:
                path.pop()
            if j:
                if not path or path[-1] != base:
                    raise RuntimeError(f"noisy rollouts of {task.task_id}: no checkpoint at step {base}")
                ep.rewind(str(base))
            ep.trace = trace[:base]
            for depth in range(base, len(calls) + 1):
                if depth in marks and (depth > base or j == 0):
                    ep.checkpoint(str(depth))
                    path.append(depth)
                if depth < len(calls):
                    ep.call(*calls[depth])
            verdict = ep.verify(answer, explain=False)
            trace = ep.trace
            out[key] = EpisodeResult(world_id=world.world_id, task_id=task.task_id, policy=cfg.label, seed=seed,
                                     answer=answer, steps=len(trace), trace=list(trace), verdict=verdict,
                                     seconds=round(time.perf_counter() - started, 6))
    return {seed: out[key_of[seed]] for seed in seeds}


def run_rollouts(world: World, cfg: RolloutConfig, task_ids: list[str] | None = None,
                 on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
    return asyncio.run(run_rollouts_async(world, cfg, task_ids, on_done))


def _job_rollouts(world: World, cfg: dict[str, Any], task_ids: list[str] | None) -> list[dict[str, Any]]:
    """The confined worker's side of run_rollouts_confined: the rollouts of a world it holds, as data."""
    return [r.model_dump(mode="json") for r in run_rollouts(world, RolloutConfig(**cfg), task_ids)]


confine.register_job("rollouts", _job_rollouts, on_world=True)
confine.register_errors(RolloutError)


def run_rollouts_confined(world: Any, cfg: RolloutConfig, task_ids: list[str] | None = None,
                          on_done: Callable[[Rollout], None] | None = None) -> list[Rollout]:
    """Rollouts of a loaded world: a synthetic policy's as one job in the confined worker (a RemoteWorld's
    tool code lives there), a policy's that needs the network from here (its episodes still confined)."""
    if getattr(world, "run_job", None) is not None and not cfg.needs_network:
        out = [Rollout.model_validate(r) for r in world.run_job("rollouts", cfg=cfg.model_dump(), task_ids=task_ids)]
        if on_done is not None:
            for r in out:
                on_done(r)
        return out
    return run_rollouts(world, cfg, task_ids, on_done)


def pass_rates(rollouts: list[Rollout]) -> dict[str, tuple[int, int]]:
    """task_id -> (passes, rollouts), in first-seen task order."""
    out: dict[str, tuple[int, int]] = {}
    for r in rollouts:
        p, n = out.get(r.task_id, (0, 0))
        out[r.task_id] = (p + (r.reward >= 1.0), n + 1)
    return out


def bucket(rate: float) -> str:
    if rate <= 0.0:
        return "0"
    if rate >= 1.0:
        return "1"
    return BUCKETS[1 + min(3, int(rate * 4 - 1e-9))]


def histogram(rates: dict[str, tuple[int, int]]) -> dict[str, int]:
    counts = dict.fromkeys(BUCKETS, 0)
    for p, n in rates.values():
        counts[bucket(p / n)] += 1
    return counts


def curate(rates: dict[str, tuple[int, int]], families: dict[str, str]) -> list[dict[str, Any]]:
    """The pass band: tasks whose pass rate is strictly between 0 and 1."""
    return [{"task_id": tid, "family": families[tid], "pass_rate": round(p / n, 4), "passes": p, "rollouts": n}
            for tid, (p, n) in rates.items() if 0 < p < n]


def rollout_rows(rollouts: list[Rollout]) -> list[dict[str, Any]]:
    return [r.model_dump(exclude={"trace", "world_id", "answer"}) for r in rollouts]


def dumps_sorted(value: Any) -> str:
    """Compact JSON with sorted keys: orjson (a tenth of json's time on traces), json for what it refuses."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # an integer past 64 bits, a key that is not a string
        return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def _step_row(s: Step) -> dict[str, Any]:
    """One step as the traces file and the traces catalog keep it, without its wall-clock latency."""
    result_json = s.result_json
    return {"step": s.index, "tool": s.tool, "args_json": dumps_sorted(s.args), "result_json": result_json,
            "error": not s.ok, "error_text": s.error or "",
            "result_sha256": result_hash_json(s.ok, result_json, s.error)}


def trace_rows(rollouts: list[Rollout]) -> list[dict[str, Any]]:
    return [{"task_id": r.task_id, "policy": r.policy, "rollout": r.rollout, **_step_row(s),
             TIMING["traces"]: s.latency_us} for r in rollouts for s in r.trace]


TIMING = {"rollouts": "seconds", "traces": "latency_us"}  # wall clock: in the catalogs, never in a bundle


def traces_file(rollouts: list[Rollout]) -> bytes:
    """Every rollout and its steps as gzipped JSON lines, one line per rollout, without wall-clock values.

    The bundle keeps this file (`traces.jsonl.gz`): the rollouts proof replays from it, and the
    rollouts and traces catalogs are derived from it, so they can be rebuilt from bundles alone.
    Same seed and code, same bytes (gzip without a timestamp).
    """
    lines = []
    traces: dict[tuple[int, ...], orjson.Fragment | None] = {}  # a reused episode has its first run's Step objects
    for r in rollouts:
        key = tuple(map(id, r.trace))
        if key not in traces:
            traces[key] = _trace_fragment(r.trace)
        lines.append(_rollout_line(r, traces[key]))
    return gzip.compress("".join(line + "\n" for line in lines).encode(), compresslevel=3, mtime=0)


def _rollout_line(r: Rollout, trace: orjson.Fragment | None) -> str:
    """One line of the traces file: dumps_sorted of the rollout with its steps, the steps already as JSON."""
    row = r.model_dump(exclude={"trace", "world_id", "answer", TIMING["rollouts"]})
    if trace is not None:
        try:
            return orjson.dumps({**row, "trace": trace}, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # what dumps_sorted falls back to json for
            pass
    row["trace"] = [_step_row(s) for s in r.trace]
    return dumps_sorted(row)


def _trace_fragment(trace: list[Step]) -> orjson.Fragment | None:
    """A rollout's steps as JSON, made once for all the rollouts that share them; None if orjson refuses them."""
    try:
        return orjson.Fragment(orjson.dumps([_step_row(s) for s in trace], option=orjson.OPT_SORT_KEYS))
    except TypeError:
        return None


def traces_file_lines(data: bytes) -> list[dict[str, Any]]:
    """The rollouts of a traces file, one dict per rollout with its `trace` of steps."""
    return [orjson.loads(line) for line in gzip.decompress(data).splitlines() if line]


TRACE_KEY = b',"trace":['  # a line's keys are sorted and `trace` is the last of them (_rollout_line)


def traces_file_episodes(data: bytes) -> dict[tuple[str, int], bytes]:
    """Each line of a traces file by (task_id, rollout), unparsed past its key fields: a reader that needs
    a few episodes' steps (the rollouts proof) parses only those lines' steps (json_steps)."""
    out: dict[tuple[str, int], bytes] = {}
    for line in gzip.decompress(data).splitlines():
        if not line:
            continue
        at = line.find(TRACE_KEY)  # a quote inside a string value is escaped: the first match is the key
        head = orjson.loads(line[:at] + b"}") if at > 0 else {}
        if "task_id" not in head or "rollout" not in head:  # not the layout _rollout_line writes
            head = orjson.loads(line)
        out[(head["task_id"], head["rollout"])] = line
    return out


def json_steps(line: bytes) -> list[dict[str, Any]]:
    """The steps of one line of traces_file_episodes: the text after its `trace` key when that is the last
    key, else the whole line parsed."""
    at = line.find(TRACE_KEY)
    if at > 0 and line.endswith(b"]}"):
        try:
            steps = orjson.loads(line[at + len(TRACE_KEY) - 1:-1])
            if isinstance(steps, list):
                return steps
        except orjson.JSONDecodeError:  # another key followed the trace
            pass
    return orjson.loads(line)["trace"]


def read_traces_file(data: bytes | list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rollouts and traces catalog rows of a traces file, or of its lines already read (wall-clock
    columns empty). The lines are left as they are."""
    rollouts, traces = [], []
    for line in traces_file_lines(data) if isinstance(data, bytes) else data:
        row = {k: v for k, v in line.items() if k != "trace"}
        key = {"task_id": row["task_id"], "policy": row["policy"], "rollout": row["rollout"]}
        traces.extend({**key, **step, TIMING["traces"]: None} for step in line["trace"])
        row[TIMING["rollouts"]] = None
        rollouts.append(row)
    return rollouts, traces


def replay_rows(world: World, rows: list[dict[str, Any]]) -> list[str]:
    """Replay recorded steps of one episode on fresh state; returns one line per step that differs."""
    task_id = rows[0]["task_id"] if rows else None
    differ = []
    with world.episode(task_id) as ep:
        for row in sorted(rows, key=lambda r: r["step"]):
            res = ep.call(row["tool"], json.loads(row["args_json"]))
            if result_hash(res.ok, res.result, res.error) != row["result_sha256"]:
                differ.append(f"{task_id} rollout {row['rollout']} step {row['step']} ({row['tool']})")
    return differ

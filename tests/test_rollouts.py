"""Rollouts, pass-band filtering and the OpenAI-compatible agent loop against a real loopback server."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.conftest import EXAMPLES, PYTHON, SMALL
from tests.llm_server import LLMServer, ScriptedModel
from worldfactory.catalog import read_world_rows
from worldfactory.policies.base import episode_seed, run_policy
from worldfactory.rollouts import (
    RolloutConfig,
    curate,
    json_steps,
    pass_rates,
    replay_rows,
    run_rollouts,
    trace_rows,
    traces_file_episodes,
    traces_file_lines,
)
from worldfactory.runtime.world import World
from worldfactory.stages.core import BuildContext, StageError, WorkDir
from worldfactory.stages.curated import prove_curated
from worldfactory.stages.rollouts import STAGE as ROLLOUTS
from worldfactory.stages.rollouts import prove_rollouts


def test_noisy_pass_band_is_exactly_the_mixed_tasks(worlds: dict[str, World]) -> None:
    world = worlds[EXAMPLES[0]]
    ids = list(world.tasks)[:40]
    rollouts = run_rollouts(world, RolloutConfig(policy="noisy", k=8, error_rate=0.15), ids)
    assert len(rollouts) == 8 * len(ids)
    rates = pass_rates(rollouts)
    families = {t.task_id: t.family for t in world.tasks.values()}
    kept = curate(rates, families)
    assert {k["task_id"] for k in kept} == {t for t, (p, n) in rates.items() if 0 < p < n}
    assert kept and any(p == n for p, n in rates.values())  # mixed outcomes: some kept, some all-pass
    for row in kept:
        p, n = rates[row["task_id"]]
        assert row["pass_rate"] == round(p / n, 4) and row["rollouts"] == 8
    again = pass_rates(run_rollouts(world, RolloutConfig(policy="noisy", k=8, error_rate=0.15), ids))
    assert again == rates  # seeded per (world, task, rollout): reproducible


def test_a_noisy_episode_taken_from_an_earlier_one_is_what_running_it_gives(worlds: dict[str, World]) -> None:
    """Rollouts run each distinct noisy episode of a task once, and a prefix episodes share once; every
    rollout must still be exactly what running its own seed gives (a key that left out the answer, or a
    slip, would hand one episode another's verdict or trace; a wrong checkpoint, another's state). Tasks
    with answers are among them: there a wrong answer can be the only slip."""
    world = worlds[EXAMPLES[0]]
    ids = [t.task_id for t in world.tasks.values() if t.answer is None][:20]
    ids += [t.task_id for t in world.tasks.values() if t.answer is not None][:10]
    cfg = RolloutConfig(policy="noisy", k=8, error_rate=0.1)
    rollouts = run_rollouts(world, cfg, ids)
    shared = sum(1 for a, b in zip(rollouts, rollouts[1:], strict=False)
                 if a.task_id == b.task_id and a.trace and a.trace[0] is b.trace[0])
    assert shared > 0  # the saving is real: some rollouts took an earlier episode's steps
    partly = sum(1 for a in rollouts for b in rollouts if a.task_id == b.task_id and a.trace and b.trace
                 and a.trace[0] is b.trace[0] and [id(s) for s in a.trace] != [id(s) for s in b.trace])
    assert partly > 0  # and some ran only their own tail after a prefix another episode ran
    for r in rollouts:
        assert r.seed == episode_seed(world, r.task_id, r.rollout)  # its own seed, not the earlier episode's
        fresh = run_policy(world, r.task_id, "noisy", seed=r.seed, error_rate=cfg.error_rate, explain=False)
        assert (r.reward, r.steps) == (fresh.verdict.reward, fresh.steps), (r.task_id, r.rollout)
        assert [(s.tool, s.args, s.result_json, s.error) for s in r.trace] == \
            [(s.tool, s.args, s.result_json, s.error) for s in fresh.trace], (r.task_id, r.rollout)


def test_oracle_drops_everything_and_null_too(worlds: dict[str, World]) -> None:
    world = worlds[EXAMPLES[1]]
    ids = list(world.tasks)[:20]
    families = {t.task_id: t.family for t in world.tasks.values()}
    oracle = pass_rates(run_rollouts(world, RolloutConfig(policy="oracle", k=3), ids))
    assert all(p == n == 3 for p, n in oracle.values()) and curate(oracle, families) == []
    null = pass_rates(run_rollouts(world, RolloutConfig(policy="null", k=2), ids))
    assert all(p == 0 for p, _ in null.values()) and curate(null, families) == []


def test_rollout_traces_replay_identically(worlds: dict[str, World]) -> None:
    world = worlds[EXAMPLES[2]]
    rollouts = run_rollouts(world, RolloutConfig(policy="noisy", k=2, error_rate=0.3), list(world.tasks)[:15])
    rows = trace_rows(rollouts)
    episodes: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        episodes.setdefault((row["task_id"], row["rollout"]), []).append(row)
    assert len(episodes) >= 25
    for key, steps in episodes.items():
        assert replay_rows(world, steps) == [], key


def test_a_curated_list_that_disagrees_with_its_rollouts_fails_the_proof(world: World, tmp_path: Path) -> None:
    """Planted in copies of the stage's files: a kept task dropped, then a pass rate changed; the
    pass-band proof names each. The files as built pass."""
    summary = json.loads(world.files["rollouts.json"])
    assert summary["k"] == 8 and summary["policy"].startswith("noisy")
    kept = [json.loads(line) for line in world.files["curated_tasks.jsonl"].decode().splitlines()]
    assert world.manifest["counts"]["curated_tasks"] == len(kept) > 1
    work = WorkDir(tmp_path, world.world_id)
    ctx = BuildContext(world_id=world.world_id, templates=None, work=work, data_root=tmp_path)  # type: ignore[arg-type]
    work.write("rollouts.json", world.files["rollouts.json"])

    def prove(rows: list[dict]) -> None:
        work.write("curated_tasks.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode())
        prove_curated(ctx)

    prove(kept)
    with pytest.raises(StageError, match=f"{len(kept)} tasks are in the pass band but {len(kept) - 1} were kept"):
        prove(kept[1:])
    with pytest.raises(StageError, match=f"curated task {kept[0]['task_id']} does not match its rollouts"):
        prove([{**kept[0], "pass_rate": 0.999}, *kept[1:]])


def test_a_trace_that_does_not_replay_fails_the_rollouts_proof(small_data: Path, tmp_path: Path) -> None:
    """Planted in a copy of a small world's files: one recorded result changed in the first episode the
    proof samples, then a task's rollouts removed from the summary; the proof names each. As built, it passes."""
    wid = SMALL[0]
    bundle = small_data / "worlds" / wid
    work = WorkDir(tmp_path, wid)
    for name in (*ROLLOUTS.reads, *ROLLOUTS.writes):
        work.write(name, (bundle / name).read_bytes())
    ctx = BuildContext(world_id=wid, templates=None, work=work, data_root=tmp_path)  # type: ignore[arg-type]
    assert prove_rollouts(ctx)["replayed_episodes"] > 0
    lines = traces_file_lines((bundle / "traces.jsonl.gz").read_bytes())
    first = min(range(len(lines)), key=lambda i: (lines[i]["task_id"], lines[i]["rollout"]))
    step = lines[first]["trace"][0]
    step["result_sha256"] = "0" * 64
    for dump in (lambda r: json.dumps(r).encode(),  # spaced, unsorted: read whole
                 lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS)):  # as built: only sampled steps are read
        work.write("traces.jsonl.gz", gzip.compress(b"".join(dump(r) + b"\n" for r in lines)))
        with pytest.raises(StageError, match=f"replayed steps differ.*{lines[first]['task_id']} rollout "
                                             f"{lines[first]['rollout']} step {step['step']}"):
            prove_rollouts(ctx)
    work.write("traces.jsonl.gz", (bundle / "traces.jsonl.gz").read_bytes())
    summary = json.loads((bundle / "rollouts.json").read_bytes())
    gone = sorted(summary["pass_rates"])[0]
    del summary["pass_rates"][gone]
    work.write("rollouts.json", json.dumps(summary).encode())
    with pytest.raises(StageError, match=f"1 tasks have no rollouts, e.g. {gone}"):
        prove_rollouts(ctx)


def test_episodes_of_a_traces_file_are_its_lines(small_data: Path) -> None:
    """traces_file_episodes (the proof's reader) gives every line's steps, as the whole-line reader does,
    for the file as built (steps sliced out unparsed) and for lines it must read whole."""
    data = (small_data / "worlds" / SMALL[0] / "traces.jsonl.gz").read_bytes()
    lines = traces_file_lines(data)
    whole = {(r["task_id"], r["rollout"]): r["trace"] for r in lines}
    sliced = traces_file_episodes(data)
    assert sliced.keys() == whole.keys() and len(whole) == len(lines) > 0
    assert all(json_steps(sliced[k]) == whole[k] for k in whole)
    moved = [{**r, "zz_after_trace": [1]} for r in lines[:3]]  # trace no longer last: read whole
    data = gzip.compress(b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in moved))
    assert {k: json_steps(v) for k, v in traces_file_episodes(data).items()} == {
        (r["task_id"], r["rollout"]): r["trace"] for r in moved}


def plans(world: World, ids: list[str]) -> dict[str, tuple[list[dict], object]]:
    return {world.tasks[t].instruction: ([c.model_dump() for c in world.tasks[t].oracle], world.tasks[t].answer)
            for t in ids}


def wf(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WORLDFACTORY_DATA=str(data), OPENAI_API_KEY="test-key")
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture
def short_tasks(worlds: dict[str, World]) -> tuple[World, list[str]]:
    world = worlds[EXAMPLES[0]]
    picked: list[str] = []
    for family in ("lookup_act", "retrieval", "workflow", "decline", "conditional"):
        picked += [t.task_id for t in world.tasks.values() if t.family == family and len(t.oracle) <= 8][:2]
    return world, picked


def test_openai_loop_completes_records_usage_and_grades(short_tasks: tuple[World, list[str]], tmp_path: Path,
                                                       worlds_dir: Path) -> None:
    world, ids = short_tasks
    model = ScriptedModel(plans(world, ids), wrong_rate=0.3)
    with LLMServer(model) as url:
        r = wf("rollouts", str(worlds_dir / world.world_id), "--policy", "openai", "--base-url", url, "--model",
               "scripted", "-k", "3", "--tasks", ",".join(ids), "--price-in", "1.5", "--price-out", "6",
               "--json", data=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["episodes"] == 3 * len(ids) and out["policy"] == "openai-scripted"
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] > 0
    expected_cost = (out["prompt_tokens"] * 1.5 + out["completion_tokens"] * 6) / 1e6
    assert out["cost_usd"] == pytest.approx(expected_cost, abs=1e-6)
    # an evaluation run of its own: its rows are the run's, never the build's `rollouts`
    assert not (tmp_path / "catalog" / "rollouts").exists()
    rows = read_world_rows(tmp_path / "catalog", "run_rollouts", world.world_id, "openai-scripted")
    assert {row["run_id"] for row in rows} == {out["run_id"]}
    assert len(rows) == 3 * len(ids)
    rewards = [row["reward"] for row in rows]
    assert 0 < sum(rewards) < len(rewards)  # graded by the verifier: the scripted slips fail, the rest pass
    assert all(row["prompt_tokens"] > 0 for row in rows)
    assert model.requests >= sum(row["steps"] for row in rows)  # one request per tool call, plus the last turn
    traces = read_world_rows(tmp_path / "catalog", "run_traces", world.world_id)
    assert {row["run_id"] for row in traces} == {out["run_id"]}
    by_episode: dict[tuple[str, int], list[dict]] = {}
    for row in traces:
        by_episode.setdefault((row["task_id"], row["rollout"]), []).append(row)
    for steps in by_episode.values():
        assert replay_rows(world, steps) == []

    q = wf("query", "SELECT family, round(avg(reward), 3) AS pass_rate, count(*) AS n FROM run_rollouts "
           "WHERE policy = 'openai-scripted' GROUP BY family ORDER BY family", "--json", data=tmp_path)
    assert q.returncode == 0, q.stderr
    fams = json.loads(q.stdout)
    assert {f["family"] for f in fams} == {"lookup_act", "retrieval", "workflow", "decline", "conditional"}
    cost = wf("query", "SELECT world_id, sum(cost_usd) AS usd, sum(prompt_tokens) AS tokens FROM run_rollouts "
              "GROUP BY world_id", "--json", data=tmp_path)
    [row] = json.loads(cost.stdout)
    assert row["world_id"] == world.world_id and row["usd"] == pytest.approx(expected_cost, abs=1e-6)


@pytest.mark.parametrize("mode", ["error500", "malformed"])
def test_a_failing_server_is_retried_then_fails_clearly_and_writes_nothing(
        short_tasks: tuple[World, list[str]], tmp_path: Path, worlds_dir: Path, mode: str) -> None:
    world, ids = short_tasks
    model = ScriptedModel(plans(world, ids[:2]), mode=mode)
    with LLMServer(model) as url:
        r = wf("rollouts", str(worlds_dir / world.world_id), "--policy", "openai", "--base-url", url, "--model",
               "scripted", "-k", "2", "--tasks", ",".join(ids[:2]), data=tmp_path)
    assert r.returncode == 2
    if mode == "error500":
        assert "InternalServerError" in r.stderr and "retries" in r.stderr
        assert model.requests >= 3  # the first try and two retries with backoff, per episode
    else:
        assert "not a JSON object" in r.stderr
    assert not (tmp_path / "catalog").exists() or not list((tmp_path / "catalog").rglob("*.parquet"))

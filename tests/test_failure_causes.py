"""Failure causes: real episodes on an example world, planted to go wrong one way each, then classified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from worldfactory.confine import open_world
from worldfactory.evals import runs
from worldfactory.evals.causes import CAUSES, Call, classify, report
from worldfactory.rollouts import RolloutConfig, _step_row
from worldfactory.runtime.world import World
from worldfactory.spec import Task

WORLD = "commerce-operations.startup--v001"


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


def play(world: World, task: Task, calls: list[Call] | list[tuple[str, dict[str, Any]]], answer: Any,
         rollout: int = 0) -> dict[str, Any]:
    """A real episode of these calls and this answer, as a run's journal keeps it."""
    with world.episode(task.task_id) as ep:
        for c in calls:
            tool, args = (c.tool, c.args) if isinstance(c, Call) else c
            ep.call(tool, args)
        verdict = ep.verify(answer, explain=False)
        return {"world_id": world.world_id, "task_id": task.task_id, "family": task.family, "rollout": rollout,
                "reward": verdict.reward, "answer": answer, "trace": [_step_row(s) for s in ep.trace]}


def oracle(task: Task) -> list[tuple[str, dict[str, Any]]]:
    return [(c.tool, dict(c.args)) for c in task.oracle]


def writes(world: World, task: Task) -> list[int]:
    return [i for i, c in enumerate(task.oracle) if not world.tools_by_name[c.tool]["annotations"]["read_only_hint"]]


def first(world: World, family: str, test: Any = lambda t: True) -> Task:
    return next(t for t in world.tasks.values() if t.family == family and test(t))


def cause_of(world: World, episode: dict[str, Any]) -> str:
    assert episode["reward"] < 1.0, "the planted episode must fail"
    return classify(world, episode)[0]


def with_id(args: dict[str, Any], delta: int) -> dict[str, Any]:
    key = next(k for k in args if k.endswith("_id"))
    return {**args, key: args[key] + delta}


def test_the_oracle_passes_so_the_plants_are_what_fails(world: World) -> None:
    task = first(world, "workflow")
    assert play(world, task, oracle(task), task.answer)["reward"] == 1.0


def test_wrong_record(world: World) -> None:
    task = first(world, "lookup_act", lambda t: len(writes(world, t)) >= 1)
    i = writes(world, task)[0]
    for delta in range(1, 40):  # the nearest other record the write accepts (some are in a state it refuses)
        calls = oracle(task)
        calls[i] = (calls[i][0], with_id(calls[i][1], delta))
        episode = play(world, task, calls, task.answer)
        if not episode["trace"][i]["error"]:
            break
    assert not episode["trace"][i]["error"]
    assert cause_of(world, episode) == "wrong_record"


def test_wrong_record_when_it_read_another_record_and_never_wrote(world: World) -> None:
    """A read of another record (another customer's orders), in step with the oracle, then no write: the wrong
    record explains the missing write; the same stop after reading the right record is a missing write."""
    task = first(world, "lookup_act", lambda t: len(t.oracle) > 2 and t.oracle[1].tool.startswith("search_")
                 and any(k.endswith("_id") for k in t.oracle[1].args) and len(writes(world, t)) >= 1)
    calls = oracle(task)[:2]
    key = next(k for k in calls[1][1] if k.endswith("_id"))
    planted = [calls[0], (calls[1][0], {**calls[1][1], key: calls[1][1][key] + 1})]
    assert cause_of(world, play(world, task, planted, None)) == "wrong_record"
    assert cause_of(world, play(world, task, [("get_user", {"user_id": 1}), *calls], None)) == "missing_write"


def test_wrong_value(world: World) -> None:
    task = first(world, "workflow")
    calls = oracle(task)
    i = next(i for i in writes(world, task) if "doc_type" in calls[i][1])  # a checked value, not free text
    kinds = world.tools_by_name[calls[i][0]]["input_schema"]["properties"]["doc_type"]["enum"]
    calls[i] = (calls[i][0], {**calls[i][1], "doc_type": next(k for k in kinds if k != calls[i][1]["doc_type"])})
    assert cause_of(world, play(world, task, calls, task.answer)) == "wrong_value"


def test_missing_write(world: World) -> None:
    task = first(world, "workflow", lambda t: len(writes(world, t)) >= 2)
    calls = oracle(task)
    del calls[writes(world, task)[0]]
    assert cause_of(world, play(world, task, calls, task.answer)) == "missing_write"


def test_extra_write(world: World) -> None:
    task = first(world, "workflow")
    calls = oracle(task)
    i = next(i for i in writes(world, task) if calls[i][0] == "create_note")
    calls.insert(i + 1, ("create_note", {**calls[i][1], "body": "a second note nobody asked for"}))
    assert cause_of(world, play(world, task, calls, task.answer)) == "extra_write"


def test_rule_ignored_when_the_agent_acts_where_the_rule_forbids(world: World) -> None:
    task = first(world, "conditional", lambda t: any(c.tool == "approve_return" for c in t.oracle))
    calls = [(("reject_return" if tool == "approve_return" else tool), args) for tool, args in oracle(task)]
    assert cause_of(world, play(world, task, calls, task.answer)) == "rule_ignored"


def test_rule_ignored_when_the_tool_refused_and_the_agent_went_on(world: World) -> None:
    task = first(world, "bulk", lambda t: len(writes(world, t)) >= 3)
    w = writes(world, task)
    calls = oracle(task)
    calls.insert(w[0] + 1, calls[w[0]])  # the same transition again: the record is no longer in a state it allows
    del calls[w[-1] + 1]  # and the last write left out, so the episode fails
    episode = play(world, task, calls, task.answer)
    refused = episode["trace"][w[0] + 1]
    assert refused["error"] and " refused: " in refused["error_text"]
    assert cause_of(world, episode) == "rule_ignored"


def test_gave_up(world: World) -> None:
    task = first(world, "workflow")
    calls = oracle(task)[: writes(world, task)[0] + 1]
    assert cause_of(world, play(world, task, calls, None)) == "gave_up"
    retrieval = first(world, "retrieval")
    assert cause_of(world, play(world, retrieval, oracle(retrieval), "I could not find it")) == "gave_up"


def test_wrong_answer(world: World) -> None:
    task = first(world, "retrieval", lambda t: isinstance(t.answer, int | float) and not isinstance(t.answer, bool))
    assert cause_of(world, play(world, task, oracle(task), task.answer + 7)) == "wrong_answer"


def test_invalid_calls(world: World) -> None:
    task = first(world, "workflow")
    calls = [("no_such_tool", {}), *oracle(task)[:-1]]
    assert cause_of(world, play(world, task, calls, task.answer)) == "invalid_call"
    tool, args = oracle(task)[0]
    calls = [(tool, {**args, "not_a_field": 1}), *oracle(task)[:-1]]
    assert cause_of(world, play(world, task, calls, task.answer)) == "invalid_call"


def test_looped(world: World) -> None:
    task = first(world, "workflow")
    calls = oracle(task)
    calls = [calls[0]] * 5 + calls[1:writes(world, task)[0]]
    assert cause_of(world, play(world, task, calls, None)) == "looped"


def test_report_counts_causes_and_keeps_an_example_of_each(world: World) -> None:
    wf = first(world, "workflow")
    ret = first(world, "retrieval", lambda t: isinstance(t.answer, int | float) and not isinstance(t.answer, bool))
    eps = [play(world, wf, oracle(wf), wf.answer, 0),
           play(world, wf, [("no_such_tool", {})], None, 1),
           play(world, ret, oracle(ret), ret.answer + 1, 0),
           play(world, ret, oracle(ret), ret.answer + 2, 1)]
    rep = report("r", eps, {world.world_id: world})
    assert (rep.episodes, rep.failed) == (4, 3)
    assert rep.by_cause == {"invalid_call": 1, "wrong_answer": 2}
    assert rep.top_cause == "wrong_answer"
    assert rep.by_family == {"retrieval": {"wrong_answer": 2}, "workflow": {"invalid_call": 1}}
    ex = rep.examples["wrong_answer"]
    assert ex.instruction == ret.instruction and ex.rollout == 0
    assert ex.mismatch is not None and ex.mismatch["table"] == "<answer>"
    inv = rep.examples["invalid_call"]
    assert inv.divergent_step == 0 and inv.divergent_call is not None and inv.divergent_call.tool == "no_such_tool"
    assert set(rep.by_cause) <= set(CAUSES)


@pytest.mark.parametrize(("policy", "weakness"), [("rule_blind", "rule_ignored"), ("first_write", "gave_up"),
                                                  ("name_confuser", "wrong_record")])
def test_each_weak_policy_s_weakness_is_its_top_cause(policy: str, weakness: str, worlds_dir: Path, tmp_path: Path,
                                                     world: World) -> None:
    """A run of each scripted weak policy, then its report: the weakness it was written with comes first."""
    cfg = RolloutConfig(policy=policy, k=1)
    info = runs.execute(tmp_path, [worlds_dir / WORLD], cfg, None, open_world)
    assert info.complete and 0 < info.passes < info.episodes
    rep = report(info.run_id, runs.run_episodes(tmp_path, info.run_id), {WORLD: world})
    assert rep.top_cause == weakness, rep.by_cause
    assert rep.by_cause[weakness] >= 0.9 * rep.failed

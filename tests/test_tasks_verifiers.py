"""Every task of the example worlds: the oracle passes and doing nothing fails; the grader is strict."""

from __future__ import annotations

from worldfactory.policies.base import run_policy
from worldfactory.requester import ASK_TOOL
from worldfactory.runtime.answers import answers_match, normalize_answer
from worldfactory.runtime.world import World
from worldfactory.spec import ToolCall


def test_dropping_any_last_write_fails_every_task(world: World) -> None:
    """A planted fault in every task: its oracle without the last write must fail (the full oracle,
    the baseline, passes; doing nothing fails)."""
    assert len(world.tasks) >= 50
    dropped = 0
    for task_id, task in world.tasks.items():
        writes = [i for i, c in enumerate(task.oracle)
                  if c.tool != ASK_TOOL and not world.tools_by_name[c.tool]["annotations"]["read_only_hint"]]
        with world.episode(task_id) as ep:
            for call in task.oracle:
                ep.call(call.tool, call.args)
            assert ep.verify(task.answer).passed, task_id
        if writes:
            plan = task.oracle[:writes[-1]] + task.oracle[writes[-1] + 1:]
            with world.episode(task_id) as ep:
                for call in plan:
                    ep.call(call.tool, call.args)
                verdict = ep.verify(task.answer)
            assert not verdict.passed and verdict.reward == 0.0 and verdict.mismatches, task_id
            dropped += 1
        null = run_policy(world, task_id, "null")
        assert not null.verdict.passed and null.verdict.mismatches, task_id
    assert dropped >= 0.7 * len(world.tasks)  # retrieval and decline tasks write nothing


def test_families_present(world: World) -> None:
    families = {t.family for t in world.tasks.values()}
    assert {"lookup_act", "conditional", "bulk", "retrieval"} <= families


def test_collateral_damage_fails(world: World) -> None:
    """The oracle plus one extra write elsewhere must fail: every table is compared."""
    task = next(t for t in world.tasks.values() if t.family == "lookup_act")
    taken = {c.tool for c in task.oracle}  # a step the oracle takes may find its example's record moved already
    extra = next(e for e in world.tool_manifest
                 if e["kind"] == "transition" and e["examples"]["valid"] and e["name"] not in taken)
    with world.episode(task.task_id) as ep:
        for call in task.oracle:
            assert ep.call(call.tool, call.args).ok
        assert ep.verify(task.answer).passed
        assert ep.call(extra["name"], extra["examples"]["valid"]).ok
        verdict = ep.verify(task.answer)
    assert not verdict.passed
    assert any(m.table == extra["table"] for m in verdict.mismatches)


def test_wrong_record_fails(world: World) -> None:
    def act(call: ToolCall) -> bool:  # the write that acts on the looked-up record
        return not call.tool.startswith(("search_", "get_", "create_")) and any(k.endswith("_id") for k in call.args)

    task = next(t for t in world.tasks.values() if t.family == "lookup_act" and any(act(c) for c in t.oracle))
    at = next(i for i, c in enumerate(task.oracle) if act(c))
    with world.episode(task.task_id) as ep:
        for i, call in enumerate(task.oracle):
            if i == at:
                id_key = next(k for k in call.args if k.endswith("_id"))
                ep.call(call.tool, {**call.args, id_key: call.args[id_key] + 1})
            else:
                ep.call(call.tool, call.args)
        assert not ep.verify(task.answer).passed


def test_wrong_answer_fails(world: World) -> None:
    task = next(t for t in world.tasks.values() if t.answer is not None)
    with world.episode(task.task_id) as ep:
        for call in task.oracle:
            ep.call(call.tool, call.args)
        assert ep.verify(task.answer).passed
        bad = ep.verify("definitely not the answer")
    assert not bad.passed and bad.answer_ok is False


def test_answer_normalisation() -> None:
    assert answers_match(12, "12", "int")
    assert answers_match(1234.5, "$1,234.50", "number")
    assert not answers_match(1234.5, "1234.51", "number")
    assert answers_match("water damage", "Water_Damage ", "text")
    assert answers_match(["B-2", "a-1"], "A-1, b-2", "list")
    assert normalize_answer("twelve", "int") is None
    assert not answers_match(3, None, "int")

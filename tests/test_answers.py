"""Answers are resolved, not substring-matched: graded through Episode.verify on the example worlds.

A decline answer passes when it names the expected business rule (name, label or id) and no other;
retrieval answers pass in any list order and any usual spelling of the number or date.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from worldfactory.runtime.answers import RuleRef, answers_match, rules_named
from worldfactory.runtime.world import World
from worldfactory.spec import Task


def _graded(world: World, task: Task, answers: list[Any]) -> list[bool]:
    """Each answer graded on the oracle's end state (one replay, the answer varied)."""
    with world.episode(task.task_id) as ep:
        for call in task.oracle:
            ep.call(call.tool, call.args)
        return [ep.verify(a, explain=False).passed for a in answers]


def _rule(world: World, task: Task) -> RuleRef:
    return next(r for r in world.rule_refs if r.name == task.answer)


def test_decline_rule_by_name_label_or_id_and_no_other(world: World) -> None:
    declines = [t for t in world.tasks.values() if t.answer_type == "reason"]
    assert declines and len(world.rule_refs) > 1
    for task in declines:
        rule = _rule(world, task)
        assert "name the business rule" in task.instruction
        right = [rule.name, rule.label, rule.id, str(rule.id), f"rule {rule.id}", rule.label.upper(),
                 f"The {rule.label} stops it.", f"Refused: {rule.name} ({rule.label})"]
        others = [r for r in world.rule_refs if r != rule]
        wrong = [*(r.label for r in others), *(r.name for r in others), others[0].id,
                 [r.name for r in world.rule_refs], "; ".join(r.label for r in world.rule_refs),
                 f"{rule.label} and {others[0].label}", "no rule applies here", None, ""]
        got = _graded(world, task, right + wrong)
        assert got[:len(right)] == [True] * len(right), (task.task_id, right, got)
        assert got[len(right):] == [False] * len(wrong), (task.task_id, wrong, got[len(right):])


def test_a_rule_inside_a_longer_rule_name_is_not_named() -> None:
    rules = [RuleRef(1, "approval_limit", "approval limit"),
             RuleRef(2, "pay_run_approval_limit", "pay run approval limit")]
    assert rules_named("the pay run approval limit", rules) == {"pay_run_approval_limit"}
    assert answers_match("pay_run_approval_limit", "pay-run approval limit", "reason", rules)
    assert not answers_match("pay_run_approval_limit", "approval limit", "reason", rules)  # the wrong, shorter rule
    assert not answers_match("approval_limit", "pay run approval limit", "reason", rules)
    assert answers_match("approval_limit", "approval limit", "reason", rules)


def test_retrieval_answers_compared_by_type(world: World) -> None:
    tasks = {kind: [t for t in world.tasks.values() if t.answer_type == kind] for kind in ("list", "number", "int")}
    assert all(tasks.values()), {k: len(v) for k, v in tasks.items()}
    for task in tasks["list"]:
        names = list(task.answer)
        shuffled = [*names[1:], *names[:1]][::-1]
        answers = [shuffled, ", ".join(n.upper() for n in shuffled), "\n".join(shuffled), names[:-1] or ["nobody"]]
        assert _graded(world, task, answers) == [True, True, True, False], task.task_id
        assert "in any order" in task.instruction
    for task in tasks["number"]:
        x = float(task.answer)
        answers = [f"${x:,.2f}", f"{x:.2f}", f"{x:,.2f} dollars", f"The total is ${x:,.2f}.", str(x), f"{x + 0.01:.2f}"]
        assert _graded(world, task, answers) == [True] * 5 + [False], task.task_id
    for task in tasks["int"]:
        n = int(task.answer)
        assert _graded(world, task, [str(n), float(n), f"{n}.", f"There are {n}.", n + 1]) == [True] * 4 + [False]


def test_dates_and_names() -> None:
    for spelled in ("2026-03-05", "March 5, 2026", "5 March 2026", "Mar 5th, 2026", "2026/03/05", date(2026, 3, 5),
                    "2026-03-05T00:00:00"):
        assert answers_match("2026-03-05", spelled, "date"), spelled
    assert not answers_match("2026-03-05", "2026-03-06", "date")
    assert not answers_match("2026-03-05", "03/05/2026", "date")  # month or day first: not read
    assert answers_match("under review", "Under_Review.", "text")
    assert not answers_match("under review", "approved", "text")
    assert answers_match(1234.5, "1,234.50", "number") and not answers_match(1234.5, "1,234.50 or 99", "number")

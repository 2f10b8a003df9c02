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


def test_a_label_without_its_trailing_unit_names_its_rule() -> None:
    """approve_time_off says "the manager time-off approval limit" (its label ends "in days"): played blind,
    an answer in the tool's words was read as naming approval_limit too."""
    rules = [RuleRef(1, "approval_limit", "approval limit"),
             RuleRef(2, "manager_time_off_days", "manager time-off approval limit in days")]
    said = "The manager time-off approval limit (manager_time_off_days, 4 days) forbids it, so I did not do it."
    assert rules_named(said, rules) == {"manager_time_off_days"}
    assert answers_match("manager_time_off_days", "the manager time-off approval limit", "reason", rules)
    assert not answers_match("manager_time_off_days", "approval limit", "reason", rules)
    assert answers_match("approval_limit", "the approval limit", "reason", rules)


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


def test_a_sentence_is_read_for_the_one_value_it_states() -> None:
    """Found blind (bench/blind_console.py): "There are 1 archived documents on claim CLM-000267." was read as
    two numbers (1 and 000267) and failed. Record numbers and dates in a sentence are names, not answers."""
    right = [("There are 1 archived documents on claim CLM-000267.", 1, "int"),
             ("There are 12 claims (as of 2026-01-10).", 12, "int"),
             ("As of January 10, 2026 the total is $1,234.50 for policy POL-000171.", 1234.5, "number"),
             ("Invoice INV-00090 comes to 2,779.79 dollars", 2779.79, "number"),
             ("3 claims; see #12", 3, "int")]
    for said, value, kind in right:
        assert answers_match(value, said, kind), said
    hedges = [("3 or 4", 3, "int"), ("about 3 to 5", 3, "int"), ("$10.00 or $11.00", 10.0, "number"),
              ("There are 1 or 2 documents on claim CLM-000267.", 1, "int")]
    for said, value, kind in hedges:  # a hedge states no one value, even when one of them is right
        assert not answers_match(value, said, kind), said


def _first_number_only(ep: Any, answer: Any) -> Any:
    """The grader as it was: a sentence must hold exactly one run of digits (a record number counts)."""
    import re

    from worldfactory.runtime.episode import Verdict

    verdict = ep.verify(answer, explain=False)
    if isinstance(answer, str) and len(re.findall(r"\d[\d,.]*", answer)) > 1:
        return Verdict(passed=False, reward=0.0)
    return verdict


def _contains_expected(ep: Any, answer: Any) -> Any:
    """A lenient grader: passes when the expected value is written anywhere in the answer."""
    from worldfactory.runtime.episode import Verdict

    verdict = ep.verify(ep.task.answer, explain=False)
    return verdict if str(ep.task.answer) in str(answer) else Verdict(passed=False, reward=0.0)


def test_a_grader_that_miscounts_a_sentence_or_passes_a_hedge_is_caught(world: World) -> None:
    """Planted graders: the old sentence reader fails the answer_sentence alternative (unfair: the world
    fails); a grader that looks for the value anywhere passes the hedge mutant ("3 or 4": the task is weak)."""
    import random

    from worldfactory.generate.validity import check_task

    task = next(t for t in sorted(world.tasks.values(), key=lambda t: t.task_id) if t.answer_type == "int")
    fine = check_task(world, task, random.Random(0))
    assert fine.valid and not fine.unfair, (fine.problems, fine.unfair)
    assert any(a.kind == "answer_sentence" and a.passed for a in fine.alternatives)
    strict = check_task(world, task, random.Random(0), verify=_first_number_only)
    assert any(a.kind == "answer_sentence" and not a.passed for a in strict.alternatives), strict.alternatives
    assert strict.unfair
    lenient = check_task(world, task, random.Random(0), verify=_contains_expected)
    assert any("mutant passes" in p and " or " in p for p in lenient.problems), lenient.problems

"""What a careless agent does with the hard tier's tasks: the plans the mutants `guess` and
`ignore_decline` run, and the scripted policies `never_asks` and `ignores_declines` follow.

- guess (ask family): never asks the requester; acts on what it can see instead (the first of two
  records, the record's own amount, the first option): the oracle without its asks, its step replaced
  by the task's declined_calls.
- ignore_decline (inbox family): does what every email asks, the ones policy declines and the repeats
  included: the oracle plus the task's declined_calls.
Both differ from gold by construction, so the verifier must fail them.
"""

from __future__ import annotations

from worldfactory.requester import ASK_TOOL
from worldfactory.spec import Task, ToolCall


def guess_plan(task: Task) -> list[ToolCall] | None:
    """The oracle acted on a guess, or None where the task has nothing to ask."""
    if not task.requester or not task.declined_calls:
        return None
    wrong = {c.tool: c for c in task.declined_calls}
    return [wrong.get(c.tool, c) for c in task.oracle if c.tool != ASK_TOOL]


def ignore_decline_plan(task: Task) -> list[ToolCall] | None:
    """The oracle plus the calls it declines, or None where it declines nothing (or asks instead)."""
    if task.requester or not task.declined_calls:
        return None
    return [*task.oracle, *task.declined_calls]


def careless_plans(task: Task) -> list[tuple[str, str, list[ToolCall]]]:
    """(mutant kind, note, calls) for each careless plan the task has."""
    out: list[tuple[str, str, list[ToolCall]]] = []
    guessed = guess_plan(task)
    if guessed is not None:
        out.append(("guess", f"act without asking: {', '.join(c.tool for c in task.declined_calls)}", guessed))
    ignored = ignore_decline_plan(task)
    if ignored is not None:
        out.append(("ignore_decline", f"also do what is declined: {', '.join(c.tool for c in task.declined_calls)}",
                    ignored))
    return out

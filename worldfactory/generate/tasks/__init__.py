"""Tasks with oracle plans, generated from the spec and the seed data.

Families come from the spec, not from per-domain lists, so every domain pack gets them:
- lookup_act: find a record as a person names it, then act on it (transition or update);
- conditional: check a business rule, then take one of two actions;
- bulk: act on every record of one parent that is in one state;
- sweep: act on every record in a state (48 to 500 calls; filed as bulk);
- year_end: one close-out of 1,000 calls or more (filed as bulk);
- workflow: create and link records around an anchor record, then notify a contact;
- retrieval: answer a question exactly (count, sum, field, list);
- decline: a request a business rule forbids; nothing may change and the answer names the rule;
- discover: a record named as people name it, beside a near-duplicate seeded on purpose (twins.py);
- handbook: a decision the policy handbook governs, its rules interacting, not all enforced by tools.
- ask: the instruction leaves out a fact (which of two records, the amount, the option) that the agent
  gets from the requester (ask_requester); acting on a guess is wrong by construction;
- inbox: work through one contact's unread request emails (seeded by generate/inbox.py): act, note,
  reply in the thread, mark read; one request a rule forbids in half of them, a repeated one in some,
  a phoned-in one logged as a colleague's note in two; or only "the last email <contact> sent us".
Each family is one module that declares its candidates, its phrases and its plan (see driver.py
for what it declares); builder.py holds the shared context and candidate enumeration, words.py
the shared words. Instructions name records by their human label (names, numbers), never
internal ids. When a validator is given (the tasks stage passes one that replays the oracle), a
task whose oracle does not run cleanly is never added.
"""

from __future__ import annotations

from collections.abc import Callable

from worldfactory.spec import Task, Vocabulary, WorldSpec

from . import (
    ask,
    bulk,
    conditional,
    coverage,
    decline,
    discover,
    handbook,
    inbox,
    lookup_act,
    retrieval,
    sweep,
    workflow,
    year_end,
)
from .builder import TaskBuilder
from .driver import quota, run_family

# The order families run in: each draws from the one seeded stream, so this order is part of the bytes.
FAMILIES = (lookup_act, conditional, bulk, sweep, year_end, workflow, retrieval, decline, discover, handbook, ask,
            inbox)
TASK_FLOOR = 100  # tasks a world has before pass-band filtering (v001 of every catalog pack reaches it)


def generate_tasks(spec: WorldSpec, tool_names: set[str], seed_image: bytes,
                   validate: Callable[[Task], bool] | None = None, vocab: Vocabulary | None = None,
                   clock: dict[str, int] | None = None) -> list[Task]:
    """All tasks of a world, deterministic for its seed: the families' quotas, then one task for each
    write tool they left unused, then (a variant only) what its mix took, where that left it under the floor.
    ``clock``, when given, gets what the world's clock kept out (clock.py): tasks refused by reason, and
    ``steps``, the (step, record) pairs it forbade (a sweep with one of them is not offered at all)."""
    builder = TaskBuilder(spec, tool_names, seed_image, validate, vocab)
    try:
        for family in FAMILIES:
            run_family(builder, family)
        coverage.run(builder)
        top_up(builder)
    finally:
        builder.close()
    if clock is not None:
        clock.update(sorted(builder.clock_refused_tasks.items()))
        clock["steps"] = len(builder.clock_refusals)
    return builder.tasks


def top_up(b: TaskBuilder) -> int:
    """A variant's mix scales each family's quota by 0.75 to 1.25, which shifts a world's tasks between
    families but must not take it under TASK_FLOOR: where it does, the families the mix lowered get back
    what it took from them, in family order, until the world reaches the floor. A world at or over the
    floor, or one whose mix lowered nothing (v001 has no mix), is left as it is: not a draw is made, so
    its bytes do not change. The number of tasks added."""
    added = 0
    for family in FAMILIES:
        short = TASK_FLOOR - len(b.tasks)
        if short <= 0:
            break
        taken = family.QUOTA - quota(b, family)
        if taken > 0:
            added += run_family(b, family, min(short, taken))
    return added

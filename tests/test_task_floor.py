"""A variant's task mix shifts tasks between families but never takes a world under the 100-task floor.

insurance-claims.startup v008 draws 0.75 for four families; with quotas scaled alone it had 99 tasks
(the one world of the 2,000 under the floor). The top-up gives those families back what the mix took,
only until the floor, and only appends: every task the families drew first stays as it was.
The hard tier's families (ask, inbox: issue 33) now lift that world over the floor on their own; the
mechanics are checked without them, as the world was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worldfactory.generate import tasks as task_gen
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, WorkDir, inputs_fingerprint, run_make
from worldfactory.stages.tasks import STAGE as TASKS
from worldfactory.templates import load_templates

SHORT = "insurance-claims.startup--v008"
HARD_TIER = {"ask", "inbox"}  # families the mix does not scale, which this world's count now includes


def _tasks_of(ctx: BuildContext) -> list[str]:
    TASKS.make(ctx)
    return ctx.work.read("tasks.jsonl", TASKS.name).decode().splitlines()


def test_a_mix_that_lowers_quotas_is_topped_up_to_the_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ts = load_templates()
    ctx = BuildContext(world_id=SHORT, templates=ts, work=WorkDir(tmp_path / SHORT, SHORT), data_root=tmp_path,
                       inputs=inputs_fingerprint(ts, SHORT))
    for stage in STAGES[: STAGES.index(TASKS)]:
        run_make(stage, ctx)
    mix = ctx.brief(TASKS.name).task_mix
    lowered = {f for f, factor in mix.items() if factor < 1}
    assert lowered, mix  # the premise: this variant's mix lowers some families

    monkeypatch.setattr(task_gen, "FAMILIES", tuple(f for f in task_gen.FAMILIES if f.FAMILY not in HARD_TIER))
    monkeypatch.setattr(task_gen, "TASK_FLOOR", 0)  # the quotas alone, as before the top-up
    alone = _tasks_of(ctx)
    # The hard tier's families and the inbox's emails (one more write tool, update_email, to coverage) took this
    # world to the floor or over it. A floor three tasks higher puts it back under, so the top-up has work to do.
    floor = max(task_gen.TASK_FLOOR, len(alone) + 3)
    monkeypatch.setattr(task_gen, "TASK_FLOOR", floor)
    topped = _tasks_of(ctx)

    assert len(alone) < floor <= len(topped)  # the mix took it under; the top-up brings it back
    assert topped[: len(alone)] == alone  # appended only: the families' own draws are untouched
    added = [json.loads(t) for t in topped[len(alone):]]
    assert len(added) == floor - len(alone)  # no further than the floor
    assert {t["family"] for t in added} <= lowered  # from the families the mix lowered

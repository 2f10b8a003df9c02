"""Completeness: alternatives derived from each oracle must pass, and a too-strict verifier is caught.

The validity check takes the verifier as a parameter; these tests plant stricter ones (the exact answer
text only, the oracle's last call only) and the check must report the alternatives they fail.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from worldfactory.generate.validity import check_task
from worldfactory.generate.verifiers import VerifierError, build_verifiers
from worldfactory.runtime.episode import Episode, Verdict
from worldfactory.runtime.world import World
from worldfactory.spec import Task
from worldfactory.stages.core import BuildContext, WorkDir
from worldfactory.stages.verifiers import prove_verifiers
from worldfactory.templates import load_templates

WORLD = "insurance-claims.regional--v001"


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


def _sample(world: World) -> list[Task]:
    """A task of each kind an alternative is made for."""
    want = [lambda t: t.answer_type == "list", lambda t: t.answer_type == "reason",
            lambda t: t.answer_type == "number",
            lambda t: any(c.tool == "create_email" and c.args.get("contact_id") for c in t.oracle)]
    return [next(t for t in world.tasks.values() if ok(t)) for ok in want]


def _kinds(report: Any, failed: bool) -> set[str]:
    return {a.kind for a in report.alternatives if a.passed != failed}


def test_alternatives_pass_the_built_verifier(world: World) -> None:
    for task in _sample(world):
        report = check_task(world, task, random.Random(0))
        assert report.valid and not report.unfair, (report.problems, report.unfair)
        assert report.alternatives and all(a.passed for a in report.alternatives), report.alternatives
    kinds = set().union(*(_kinds(check_task(world, t, random.Random(0)), False) for t in _sample(world)))
    assert {"extra_read", "recipient_fields", "list_order", "number_format", "rule_named"} <= kinds, kinds


def test_a_verifier_that_wants_the_exact_answer_text_is_caught(world: World) -> None:
    def exact(ep: Episode, answer: Any) -> Verdict:
        v = ep.verify(answer, explain=False)
        assert ep.task is not None
        return v if answer == ep.task.answer else Verdict(passed=False, reward=0.0)

    for task in _sample(world)[:3]:
        report = check_task(world, task, random.Random(0), verify=exact)
        assert report.unfair and report.valid, (task.task_id, report.unfair)  # fails the world, not the task
        assert _kinds(report, True) & {"list_order", "rule_named", "number_format"}


def test_a_verifier_that_wants_the_oracles_calls_only_is_caught(world: World) -> None:
    def last_call(ep: Episode, answer: Any) -> Verdict:
        v = ep.verify(answer, explain=False)
        assert ep.task is not None
        last = ep.task.oracle[-1]
        same = bool(ep.trace) and (ep.trace[-1].tool, ep.trace[-1].args) == (last.tool, last.args)
        return v if same else Verdict(passed=False, reward=0.0)

    report = check_task(world, _sample(world)[0], random.Random(0), verify=last_call)
    assert "extra_read" in _kinds(report, True), report.alternatives


def test_a_tool_that_keeps_both_recipient_fields_apart_is_caught(world: World) -> None:
    """Planted in tools.py: create_email no longer fills the address from the contact, so a contact
    emailed with their own address is a different email; the recipient alternative must fail."""
    source = world.files["tools.py"].decode()
    planted = re.sub(r"    if contact_id is not None:\n        filled = .*?\n        db\.guard\(given.*?\n", "", source,
                     flags=re.DOTALL)
    assert planted != source
    broken = World({**world.files, "tools.py": planted.encode()}, static=False)
    task = _sample(world)[3]
    broken.use_verifiers(build_verifiers(broken, [task]))  # gold as the broken tool makes it
    report = check_task(broken, task, random.Random(0))
    assert "recipient_fields" in _kinds(report, True), report.alternatives


def test_an_unfair_verifier_fails_the_world(worlds_dir: Path, tmp_path: Path) -> None:
    """The stage's proof refuses a world whose validity report lists a valid alternative its verifier fails."""
    bundle = worlds_dir / WORLD
    for f in bundle.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    ctx = BuildContext(world_id=WORLD, templates=load_templates(), work=WorkDir(tmp_path, WORLD), data_root=tmp_path)
    proved = prove_verifiers(ctx)
    assert proved["alternatives_passed"] == proved["alternatives"] > 0
    report = tmp_path / "verifier_report.jsonl"
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    rows[0]["unfair"] = ["list_order (answer ['b', 'a'])"]
    report.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    with pytest.raises(VerifierError, match="valid alternative solutions fail their verifier"):
        prove_verifiers(ctx)

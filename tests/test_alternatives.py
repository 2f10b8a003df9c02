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

from worldfactory.catalog import query
from worldfactory.generate.validity import check_task, defaults_given, reordered
from worldfactory.generate.verifiers import build_verifiers
from worldfactory.runtime.episode import Episode, Verdict
from worldfactory.runtime.world import World
from worldfactory.spec import Task
from worldfactory.stages.core import BuildContext, WorkDir, run_prove
from worldfactory.stages.verifiers import STAGE, prove_verifiers
from worldfactory.templates import load_templates

WORLD = "litigation-firm.national--v001"  # its retrieval draws lists of several items


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


def _sample(world: World) -> list[Task]:
    """A task of each kind an alternative is made for."""
    want = [lambda t: t.answer_type == "list" and len(t.answer) > 1, lambda t: t.answer_type == "reason",
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


def test_a_tool_that_does_not_find_the_contact_by_address_is_caught(world: World) -> None:
    """Found blind: "email contact Quinn Chowdhury" sent to her address alone failed (contact_id null). Planted in
    tools.py: create_email no longer finds the contact from the address; the address-alone alternative must fail."""
    source = world.files["tools.py"].decode()
    found_by_address = r"    elif to_address is not None:\n        owners = .*?\n            contact_id = .*?\n"
    planted = re.sub(found_by_address, "", source, flags=re.DOTALL)
    assert planted != source
    broken = World({**world.files, "tools.py": planted.encode()}, static=False)
    task = _sample(world)[3]
    broken.use_verifiers(build_verifiers(broken, [task]))
    report = check_task(broken, task, random.Random(0))
    failed = [a.note for a in report.alternatives if a.kind == "recipient_fields" and not a.passed]
    assert failed and all("alone" in n for n in failed), report.alternatives
    fine = check_task(world, task, random.Random(0))
    assert any("alone" in a.note and a.passed for a in fine.alternatives), fine.alternatives


def _copy(bundle: Path, dest: Path) -> BuildContext:
    for f in bundle.iterdir():
        if f.is_file():
            shutil.copy(f, dest / f.name)
    return BuildContext(world_id=WORLD, templates=load_templates(), work=WorkDir(dest, WORLD), data_root=dest)


def test_an_unfair_verifier_fails_the_world_on_its_own_gate(worlds_dir: Path, tmp_path: Path) -> None:
    """The stage's gate `alternatives_valid` refuses a world whose validity report has a valid alternative its
    verifier fails; the soundness check `verifiers_valid` still passes, so the failure names completeness."""
    ctx = _copy(worlds_dir / WORLD, tmp_path)
    proved = prove_verifiers(ctx)
    assert proved["alternatives_passed"] == proved["alternatives"] > 0
    assert run_prove(STAGE, ctx).passed
    report = tmp_path / "verifier_report.jsonl"
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    rows[0]["alternatives"][0]["passed"] = False
    rows[0]["unfair"] = ["list_order (answer ['b', 'a'])"]
    report.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    proof = run_prove(STAGE, ctx)
    assert not proof.passed and proof.failed_checks == ["alternatives_valid"], proof
    assert proof.check_passed("verifiers_valid") and not proof.check_passed("alternatives_valid")
    assert proof.details["alternatives_passed"] == proved["alternatives_passed"] - 1
    assert "alternatives_valid" in proof.reason and "list_order" in proof.reason, proof.reason


def test_the_catalog_counts_alternatives_per_world(worlds_dir: Path) -> None:
    columns, rows = query(worlds_dir.parent, "SELECT alternatives, alternatives_passed FROM worlds")
    assert columns == ["alternatives", "alternatives_passed"] and len(rows) == 3, rows
    assert all(total == passed > 0 for total, passed in rows), rows


def _writes(world: World, calls: list[Any]) -> list[tuple[str, str]]:
    return [(c.tool, json.dumps(c.args, sort_keys=True)) for c in calls
            if not world.tools_by_name[c.tool]["annotations"]["read_only_hint"]]


def test_a_verifier_that_wants_the_oracles_write_order_is_caught(world: World) -> None:
    """Independent writes in another order are an alternative of their own, counted with the rest."""
    def in_order(ep: Episode, answer: Any) -> Verdict:
        v = ep.verify(answer, explain=False)
        assert ep.task is not None
        same = _writes(ep.world, list(ep.trace)) == _writes(ep.world, ep.task.oracle)
        return v if same else Verdict(passed=False, reward=0.0)

    task = next(t for t in world.tasks.values() if reordered(world, t) is not None)
    fair = check_task(world, task, random.Random(0))
    assert "write_order" in _kinds(fair, False), fair.alternatives
    report = check_task(world, task, random.Random(0), verify=in_order)
    assert "write_order" in _kinds(report, True), report.alternatives


def test_a_verifier_that_wants_the_oracles_exact_arguments_is_caught(world: World) -> None:
    """An optional field of a create or update given the default it gets anyway (tools.json) must pass."""
    def exact_args(ep: Episode, answer: Any) -> Verdict:
        v = ep.verify(answer, explain=False)
        assert ep.task is not None
        mine = set(_writes(ep.world, list(ep.trace)))
        return v if mine <= set(_writes(ep.world, ep.task.oracle)) else Verdict(passed=False, reward=0.0)

    task = next(t for t in world.tasks.values()
                if len(t.oracle) <= 20 and any(defaults_given(world, c) for c in t.oracle))
    fair = check_task(world, task, random.Random(0))
    assert "optional_default" in _kinds(fair, False), fair.alternatives
    report = check_task(world, task, random.Random(0), verify=exact_args)
    assert "optional_default" in _kinds(report, True), report.alternatives

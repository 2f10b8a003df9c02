"""Tasks that hold up: six families, long horizons, graders proven against mutants, identical replays."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, PYTHON
from worldfactory.generate.validity import check_task
from worldfactory.generate.verifiers import VerifierError, check_verifiers
from worldfactory.runtime.diff import Mismatch
from worldfactory.runtime.episode import Episode, Verdict
from worldfactory.runtime.world import World
from worldfactory.seeds import stage_rng

FAMILIES = {"lookup_act", "conditional", "bulk", "workflow", "retrieval", "decline", "discover", "handbook", "ask",
            "inbox"}
HARD_TIER = {"discover", "handbook", "ask", "inbox"}  # hard by what they hide, not by their length


def test_a_tampered_gold_fails_the_verifier_proof(world: World) -> None:
    """Planted: one task's stored gold loses a table, or its digest changes; the proof names the task."""
    task_id = next(t for t, v in world.verifiers["tasks"].items() if v["diff"])
    for tamper in ("drop_table", "digest"):
        verifiers = json.loads(world.files["verifiers.json"])
        gold = verifiers["tasks"][task_id]
        if tamper == "drop_table":
            gold["diff"].pop(sorted(gold["diff"])[0])
        else:
            gold["digest"] = "0" * 64
        bad = World({**world.files, "verifiers.json": json.dumps(verifiers).encode()})
        with pytest.raises(VerifierError, match=task_id):
            check_verifiers(bad)
    assert check_verifiers(world)["oracle_pass"] == len(world.tasks)  # the untampered world passes


def test_the_report_covers_every_mutant_kind(world: World) -> None:
    rows = [json.loads(line) for line in world.files["verifier_report.jsonl"].decode().splitlines()]
    kinds = {m["kind"] for r in rows for m in r["mutant_results"]}
    assert kinds == {"drop_step", "change_argument", "wrong_record", "destructive_call", "wrong_answer", "trap",
                     "guess", "ignore_decline"}
    assert sum(r["caught"] for r in rows) >= 3 * len(rows)  # several non-equivalent mutants per task
    assert sum(r["reorder_passes"] is True for r in rows) >= 10


def test_the_built_report_matches_and_is_summarised(world: World) -> None:
    rows = [json.loads(line) for line in world.files["verifier_report.jsonl"].decode().splitlines()]
    assert {r["task_id"] for r in rows} == set(world.tasks)
    assert all(r["valid"] and r["missed"] == 0 for r in rows)
    validity = world.manifest["verifier_validity"]
    assert validity["tasks"] == len(rows) and validity["caught_rate"] == 1.0
    assert validity["caught"] == sum(r["caught"] for r in rows)
    assert validity["equivalent"] == sum(r["equivalent"] for r in rows)


def collateral_blind(ep: Episode, answer: Any) -> Verdict:
    """A planted weak verifier: it only looks at the task's own table and ignores collateral damage."""
    assert ep.task is not None
    real = ep.verify(answer)
    kept: list[Mismatch] = [m for m in real.mismatches if m.table in (ep.task.target, "<answer>")]
    if real.mismatches and not kept and real.passed is False:
        # the real verifier saw changes only elsewhere; the weak one calls that a pass
        return Verdict(passed=True, reward=1.0, answer_ok=real.answer_ok, mismatches=[])
    return real


def test_a_weak_verifier_is_caught(worlds: dict[str, World]) -> None:
    world = worlds[EXAMPLES[0]]
    rng = stage_rng(world.brief.generation_seed, "validity")
    flagged = []
    for task in list(world.tasks.values())[:40]:
        report = check_task(world, task, rng, verify=collateral_blind)
        if not report.valid:
            flagged.append(report)
    assert flagged, "the validity check must catch a verifier that ignores collateral changes"
    assert any("destructive_call" in p for r in flagged for p in r.problems)
    assert all(any("mutant passes but differs from gold" in p for p in r.problems) for r in flagged)


@pytest.mark.parametrize("wid", EXAMPLES)
def test_family_and_horizon_minimums(worlds: dict[str, World], wid: str) -> None:
    world = worlds[wid]
    tasks = list(world.tasks.values())
    lengths = sorted(len(t.oracle) for t in tasks)
    assert len(tasks) >= 100
    assert {t.family for t in tasks} == FAMILIES
    assert statistics.median(lengths) >= 5
    base = [t for t in tasks if t.family not in HARD_TIER]  # hard by what they leave out, not by their length
    assert sum(n >= 50 for n in lengths) >= 0.05 * len(base)
    assert lengths[-1] >= 1000
    instructions = [t.instruction for t in tasks]
    assert len(set(instructions)) == len(instructions)
    for t in tasks:  # people, companies, dates and amounts: never internal ids
        assert not re.search(r"\b\w+_id\b|\bid\s*\d", t.instruction), t.instruction
    for family in FAMILIES:
        openings = {" ".join(t.instruction.split()[:2]) for t in tasks if t.family == family}
        assert len(openings) >= 2, family  # several phrasings per family
    decline = [t for t in tasks if t.family == "decline"]
    assert all(t.answer_type == "reason" and t.answer for t in decline)


def wf(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, WORLDFACTORY_DATA=str(data))
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_replay_of_a_1000_call_trace_is_identical_and_refused_elsewhere(worlds_dir: Path, tmp_path: Path) -> None:
    world = World.open(worlds_dir / EXAMPLES[0])
    longest = max(world.tasks.values(), key=lambda t: len(t.oracle))
    assert len(longest.oracle) >= 1000
    trace = tmp_path / "trace.jsonl"
    data = worlds_dir.parent
    r = wf("run", EXAMPLES[0], longest.task_id, "--policy", "oracle", "--trace", str(trace), "--json", data=data)
    assert r.returncode == 0 and json.loads(r.stdout)["passed"], r.stderr
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["content_hash"] == world.content_hash and header["world_id"] == EXAMPLES[0]

    again = wf("replay", str(trace), "--json", data=data)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["identical"] and len(report["steps"]) == len(longest.oracle) and report["reward"] == 1.0
    assert all(s["identical"] and s["recorded"] == s["replayed"] for s in report["steps"])

    other = wf("replay", str(trace), "--world", str(worlds_dir / EXAMPLES[1]), data=data)
    assert other.returncode == 2 and "recorded against" in other.stderr and "version" in other.stderr

    lines = trace.read_text().splitlines()
    step = json.loads(lines[7])
    step["args"] = {k: (v + 1 if k.endswith("_id") else v) for k, v in step["args"].items()}
    lines[7] = json.dumps(step)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join(lines) + "\n")
    bad = wf("replay", str(tampered), "--json", data=data)
    assert bad.returncode == 1
    differ = [s["index"] for s in json.loads(bad.stdout)["steps"] if not s["identical"]]
    assert differ and differ[0] == step["index"]

"""bench/blind_console.py: solutions replayed over MCP against `worldfactory serve` and graded by the control plane.

One served world (the real server process, confined as in production), three solution lines: a valid one
(looked up by search, ids taken from results), a planted wrong answer, and a line written for another
instruction, and one for a task the world no longer has. The console must pass the first, count the second as a
failure graded unfairly (it is not marked as the author's error), and refuse to grade the last two (stale) rather
than score them or abort the run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"


def _console():  # bench/ is scripts, not a package: load the file as the module it is run as
    spec = importlib.util.spec_from_file_location("blind_console", Path(__file__).parent.parent / "bench" /
                                                  "blind_console.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["blind_console"] = module
    spec.loader.exec_module(module)
    return module


blind_console = _console()


def test_references_into_results() -> None:
    names = {"c": {"results": [{"id": 7, "claim_number": "CLM-7", "amount": 1.5},
                               {"id": 9, "claim_number": "CLM-9", "amount": 2.25}], "total": 2}}
    assert blind_console.fill("$c.results.1.id", names) == 9
    assert blind_console.fill("$c.results.[claim_number=clm-9].id", names) == 9
    assert blind_console.fill("$c.results|sum:amount", names) == 3.75
    assert blind_console.fill("$c.results|map:id", names) == [7, 9]
    said = blind_console.fill({"s": "Claim ${c.results.0.claim_number} of ${c.total}"}, names)
    assert said == {"s": "Claim CLM-7 of 2"}
    with pytest.raises(LookupError):
        blind_console.fill("$nothing.id", names)


def test_solutions_are_replayed_over_mcp_and_graded_by_the_control_plane(worlds_dir: Path, tmp_path: Path) -> None:
    world = World.open(worlds_dir / WORLD)
    pattern = re.compile(r"every prospect account whose account owner is user (\w+ \w+) as an active customer")
    task = next(t for t in sorted(world.tasks.values(), key=lambda t: t.task_id) if pattern.search(t.instruction))
    owner = pattern.search(task.instruction).group(1)  # type: ignore[union-attr]
    calls = [{"tool": "search_users", "args": {"full_name": owner}, "as": "u"},
             {"tool": "search_accounts", "args": {"owner_id": "$u.results.[full_name=" + owner + "].id",
                                                  "status": "prospect", "limit": 500}, "as": "a"},
             {"each": "$a.results", "tool": "activate_account", "args": {"account_id": "$item.id"}}]
    retrieval = next(t for t in sorted(world.tasks.values(), key=lambda t: t.task_id) if t.answer_type == "int")
    lines = [{"task_id": task.task_id, "instruction": task.instruction, "calls": calls, "answer": None},
             {"task_id": retrieval.task_id, "instruction": retrieval.instruction, "calls": [],
              "answer": f"{int(retrieval.answer) + 1} or so"},  # planted: wrong, and not marked as the author's
             {"task_id": task.task_id, "instruction": "an instruction the world no longer has", "calls": calls},
             {"task_id": "bulk-999", "instruction": "a task the rebuilt world no longer has", "calls": calls}]
    solutions = tmp_path / f"{WORLD}.jsonl"
    solutions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = blind_console.run_world(worlds_dir / WORLD, solutions, verbose=False)
    assert (result["tasks"], result["passed"], result["failed"], result["unfair"], result["stale"]) == (2, 1, 1, 1, 2)
    passed = {r["task_id"]: r["passed"] for r in result["rows"]}
    assert passed == {task.task_id: True, retrieval.task_id: False}

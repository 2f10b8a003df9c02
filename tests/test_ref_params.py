"""Record-reference parameters on transitions (issue 11, item 3): `Param.ref` names a table; the tool reads
the row the id names before it writes anything, probes try an id that exists and one that does not, and
tasks name the record by its label and search for its id, so the verifier grades the right record."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from worldfactory.packs import check_files
from worldfactory.runtime.world import World
from worldfactory.spec import Param, Task, ToolCall
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import TemplateError, load_templates

PACK = "domains/accounts-payable.yaml"
WORLD = "accounts-payable.startup--v001"
TOOL = "code_vendor_invoice"
PARAM = "approver_id"
LOC = "tables[4:vendor_invoices].workflow.transitions[0:code_vendor_invoice].params[1:approver_id]"
DECLARED = "{name: approver_id, type: integer, ref: users, description:"
MISSING = 999999


def _broken(tmp_path: Path, new: str) -> Path:
    """A copy of the templates with the approver parameter of the accounts-payable pack rewritten."""
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    path = root / PACK
    text = path.read_text()
    assert text.count(DECLARED) == 1, "the pack no longer declares the approver parameter this way"
    path.write_text(text.replace(DECLARED, new))
    return path


@pytest.mark.parametrize(("new", "field", "words"), [
    ("{name: approver_id, type: integer, ref: staff_members, description:", "ref",
     "ref 'staff_members' is not a table in this pack or its modules"),
    ("{name: approver_id, type: text, ref: users, description:", "type",
     "a ref parameter holds the id of a row of 'users', so its type must be 'integer', got 'text'"),
    ("{name: approver_id, type: integer, ref: invoice_lines, description:", "ref",
     "table 'invoice_lines' needs a unique `label` that its `search` includes"),
], ids=["unknown table", "not an integer", "records without a name"])
def test_a_bad_ref_parameter_is_refused_naming_file_and_field(tmp_path: Path, new: str, field: str,
                                                              words: str) -> None:
    path = _broken(tmp_path, new)
    with pytest.raises(TemplateError) as err:
        load_templates(path.parent.parent)
    hit = [line for line in str(err.value).splitlines() if line.startswith(f"{path}: field '{LOC}.{field}': ")]
    assert hit and words in hit[0], str(err.value)
    assert hit[0] in check_files([path])  # check-pack says the same without loading anything else


def test_a_parameter_without_ref_keeps_the_spec_bytes() -> None:
    """spec.json of worlds whose packs have no ref parameters must not change: `ref` is left out while None."""
    assert "ref" not in Param(name="reason").model_dump()
    assert Param(name="crew_id", type="integer", ref="crews").model_dump()["ref"] == "crews"




def _rows(world: World, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with world.episode() as ep:
        return list(ep.conn.execute(sql, args))


def _ref_tasks(world: World) -> list[Task]:
    return [t for t in world.tasks.values() if any(c.tool == TOOL for c in t.oracle)]


def _builds_and_a_task_uses_the_ref_tool(world: World) -> None:
    m = world.manifest
    assert m["coverage"] == 1.0, m["coverage_unused"]
    assert m["verification"]["oracle_pass"] == m["verification"]["tasks"] == m["counts"]["tasks"]
    assert m["verification"]["null_pass"] == 0
    assert m["verifier_validity"]["missed"] == 0
    assert _ref_tasks(world), f"no task calls {TOOL}"


def _the_schema_says_whose_id_it_is(world: World) -> None:
    schema = world.tools_by_name[TOOL]["input_schema"]
    prop = schema["properties"][PARAM]
    assert prop["type"] == "integer" and prop["minimum"] == 1 and PARAM in schema["required"]
    said = prop["description"]
    assert said.endswith("(id of a user, a row of table users; search_users finds it)"), said


def _probes_use_an_id_of_the_seed_and_one_that_does_not_exist(world: World) -> None:
    examples = world.tools_by_name[TOOL]["examples"]
    valid = examples["valid"]
    assert _rows(world, "SELECT id FROM users WHERE id = ?", (valid[PARAM],)), valid
    missing = [p for p in examples["invalid"] if p["args"].get(PARAM) == MISSING]
    assert missing and missing[0]["expect"] == f"no user with id {MISSING}", examples["invalid"]
    assert {k: v for k, v in missing[0]["args"].items() if k != PARAM} == \
        {k: v for k, v in valid.items() if k != PARAM}  # only the reference is wrong


def _an_unknown_id_is_refused_and_changes_nothing(world: World) -> None:
    invoice = _rows(world, "SELECT id FROM vendor_invoices WHERE status = 'received' ORDER BY id LIMIT 1")[0][0]
    user = _rows(world, "SELECT max(id) FROM users")[0][0]
    with world.episode() as ep:
        before = ep.snapshot()
        step = ep.call(TOOL, {"vendor_invoice_id": invoice, "gl_account": "office_expense", PARAM: user + 1})
        assert not step.ok and f"no user with id {user + 1}" in (step.error or ""), step
        assert ep.snapshot() == before and ep.written == set()
        # the same call with a user that exists goes through and records that user
        done = ep.call(TOOL, {"vendor_invoice_id": invoice, "gl_account": "office_expense", PARAM: user})
        assert done.ok, done.error
        assert done.result and done.result["vendor_invoice"][PARAM] == user
        assert done.result["vendor_invoice"]["status"] == "pending_approval"


def _replay(world: World, task: Task, calls: list[ToolCall]) -> bool:
    with world.episode(task.task_id) as ep:
        for call in calls:
            step = ep.call(call.tool, call.args)
            assert step.ok, (call, step.error)
        return ep.verify(task.answer).passed


def _instructions_name_the_record_by_label_and_the_verifier_grades_that_record(world: World) -> None:
    users = dict(_rows(world, "SELECT id, full_name FROM users"))
    checked = 0
    for task in _ref_tasks(world):
        i, call = next((i, c) for i, c in enumerate(task.oracle) if c.tool == TOOL)
        chosen = call.args[PARAM]
        name = users[chosen]
        assert name in task.instruction, task.instruction  # by name ...
        assert PARAM not in task.instruction and f"user {chosen} " not in task.instruction  # ... never by id
        # the plan finds the id by searching for that name before it acts
        assert ToolCall(tool="search_users", args={"full_name": name}) in task.oracle[:i], task.oracle
        assert _replay(world, task, task.oracle)
        other = next(u for u in sorted(users) if u != chosen)
        wrong = [*task.oracle[:i], ToolCall(tool=TOOL, args={**call.args, PARAM: other}), *task.oracle[i + 1:]]
        assert not _replay(world, task, wrong), f"{task.task_id}: the verifier passes approver {other}"
        checked += 1
    assert checked >= 1


def test_a_world_with_a_ref_parameter(tmp_path: Path) -> None:
    """One build (a test per check would build it once per xdist worker), every check on it."""
    build_world(WORLD, tmp_path, load_templates())
    world = World.open(tmp_path / "worlds" / WORLD)
    _builds_and_a_task_uses_the_ref_tool(world)
    _the_schema_says_whose_id_it_is(world)
    _probes_use_an_id_of_the_seed_and_one_that_does_not_exist(world)
    _an_unknown_id_is_refused_and_changes_nothing(world)
    _instructions_name_the_record_by_label_and_the_verifier_grades_that_record(world)

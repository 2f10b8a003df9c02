"""A note chained after a new record says which record it is on, and `subject_id` says which table it points at.

"Open a document ... then leave a note on it" points, by grammar, at the new document, while the oracle
notes the anchor record: an agent that follows the words is graded wrong. Instructions name the record
the note goes on, and every `subject_id` parameter names the table its ids come from in this world.
"""

from __future__ import annotations

import re

from worldfactory.runtime.world import World
from worldfactory.spec import Task

NOT_NEW = ("create_note", "create_email")  # what a chained task adds after the new record


def test_a_note_after_a_new_record_names_the_record_it_is_on(world: World) -> None:
    def chains(task: Task) -> bool:  # a new record, then a note
        tools = [c.tool for c in task.oracle]
        return "create_note" in tools and any(t.startswith("create_") and t not in NOT_NEW for t in tools)

    chained = [t for t in world.tasks.values() if t.family == "workflow" and chains(t)]
    assert chained, "the example world has no workflow task to check"
    for task in chained:
        assert not re.search(r"\bnote\b[^.]*\bon it\b", task.instruction), task.instruction
        anchor = world.norm["notes"].refs["subject_id"]
        singular = next(t.singular for t in world.spec.tables if t.name == anchor)
        assert f"on the {singular}" in task.instruction, task.instruction


def test_every_subject_id_names_the_table_it_points_at(world: World) -> None:
    tables = set(world.norm)
    found = 0
    for tool in world.tool_manifest:
        param = tool["input_schema"]["properties"].get("subject_id")
        if param is None:
            continue
        found += 1
        named = re.search(r"a row of table (\w+)", param.get("description", ""))
        assert named and named.group(1) in tables, (tool["name"], param.get("description"))
        table = tool.get("table")
        if table in world.norm and "subject_id" in world.norm[table].refs:
            assert named.group(1) == world.norm[table].refs["subject_id"], (tool["name"], param["description"])
    assert found, "no tool takes a subject_id"


def test_a_workflow_note_reads_like_the_domain(world: World) -> None:
    """A note a task asks for is in the domain's own wording (the pack's `texts: notes.body`, which its seeded
    notes are drawn from): not "Customer informed of the next steps" on a paycheck."""
    gen = world.spec.table("notes").column("body").gen
    assert isinstance(gen, dict) and gen.get("choice"), "the example's pack gives its notes no wording of its own"
    domain = set(gen["choice"])
    notes = [c.args["body"] for t in world.tasks.values() if t.family == "workflow"
             for c in t.oracle if c.tool == "create_note"]
    assert notes, "the example world has no workflow note to check"
    assert set(notes) <= domain, sorted(set(notes) - domain)

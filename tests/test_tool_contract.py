"""Tools an agent can use without guessing (issue 30, item 4): every parameter described, references say
their table and how to find the id, grammatical descriptions, the world's today where dates are taken,
create_email takes a contact with or without the contact's own address, create tools fill the record's
code, and what a description promises (a retired resource is never booked) the tool enforces."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worldfactory.generate.tasks.words import a_or_an
from worldfactory.runtime.world import World
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, WorkDir, run_make, run_prove
from worldfactory.templates import load_templates

UP_TO_TASKS = ("world_brief", "world_schema", "seed_database", "world_tools", "world_tasks")


def _article_errors(text: str) -> list[str]:
    found = re.finditer(r"\b([Aa]n?) ([a-z][\w-]*)", text)
    return [m.group(0) for m in found if m.group(1).lower() != a_or_an(m.group(2))]


def test_every_parameter_is_described_and_references_name_their_table(world: World) -> None:
    for entry in world.tool_manifest:
        assert not _article_errors(entry["description"]), (entry["name"], _article_errors(entry["description"]))
        assert "Refused when" not in entry["description"] or not re.search(
            r"Refused when [^.]*\b(cannot|must not)\b", entry["description"]), entry["description"]
        props = entry["input_schema"]["properties"]
        for name, prop in props.items():
            said = prop.get("description", "")
            assert said, (entry["name"], name)
            assert not _article_errors(said), (entry["name"], name, said)
        spec_cols = {c.name: c for c in world.spec.table(entry["table"]).columns}
        for name, prop in props.items():
            col = spec_cols.get(name)
            if col is not None and col.ref and entry["kind"] in ("create", "update", "search") and not col.description:
                assert f"a row of table {col.ref}" in prop["description"], (entry["name"], name, prop["description"])
        takes_dates = any("date" in str(p) for p in props.values())
        assert (f"today is {world.clock}" in entry["description"]) == takes_dates, entry["name"]


def test_a_search_filter_says_what_it_matches_not_how_to_write_it(world: World) -> None:
    """Found blind: search_emails' contact_id filter read "the recipient ...; their address is filled in" and
    to_address "with contact_id leave it out", create_email's guidance on a tool that writes nothing. A column's
    `description` is for the tools that write it; a filter is described by what it matches."""
    from worldfactory.generate.tools import tool_specs

    tools = {t["name"]: t for t in world.tool_manifest}
    search = tools["search_emails"]["input_schema"]["properties"]
    create = tools["create_email"]["input_schema"]["properties"]
    assert "filled in" in create["contact_id"]["description"] and "leave it out" in create["to_address"]["description"]
    for name in ("contact_id", "to_address"):
        said = search[name]["description"]
        assert "filled in" not in said and "leave it out" not in said and "when they" not in said, (name, said)
    assert "a row of table contacts" in search["contact_id"]["description"]
    spec = world.spec.model_copy(deep=True)  # planted: a filter column's own description must not reach the filter
    spec.table("emails").column("subject").description = "PLANTED write guidance"
    made = {t.name: t for t in tool_specs(spec)}
    assert not any(p.description == "PLANTED write guidance" for p in made["search_emails"].params)
    assert any(p.description == "PLANTED write guidance" for p in made["create_email"].params)


def _email_task(world: World) -> tuple[Any, int]:
    for task in world.tasks.values():
        for i, call in enumerate(task.oracle):
            if call.tool == "create_email" and call.args.get("contact_id") and not call.args.get("to_address"):
                return task, i
    raise AssertionError("no task emails a contact")


def test_create_email_takes_a_contact_with_or_without_their_own_address(world: World) -> None:
    task, at = _email_task(world)
    with world.episode() as ep:
        contact = ep.call("get_contact", {"contact_id": task.oracle[at].args["contact_id"]}).result
    address = contact["contact"]["email"]  # type: ignore[index]
    who = task.oracle[at].args["contact_id"]
    alone = {"contact_id": None, "to_address": address}  # found blind: the contact's address alone is that contact
    for extra, passes in (({}, True), ({"to_address": address}, True), ({"to_address": "someone@else.example"}, False),
                          (alone, True), ({"contact_id": None, "to_address": "someone@else.example"}, False)):
        with world.episode(task.task_id) as ep:
            for i, call in enumerate(task.oracle):
                args = {k: v for k, v in {**call.args, **extra}.items() if v is not None} if i == at else call.args
                step = ep.call(call.tool, args)
                if i == at:
                    assert step.ok == passes or extra.get("contact_id", who) is None, step.error
                    if passes:
                        assert step.result["email"]["to_address"] == address  # type: ignore[index]
                        assert step.result["email"]["contact_id"] == who  # type: ignore[index]
            assert ep.verify(task.answer).passed == passes, extra
    props = world.tools_by_name["create_email"]["input_schema"]["properties"]
    assert "contact" in props["contact_id"]["description"] and "a contact's own" in props["to_address"]["description"]


def _partial(world_id: str, work: Path, stages: tuple[str, ...] = UP_TO_TASKS) -> World:
    """A world built only through the given stages (a few seconds): enough to call its tools."""
    ctx = BuildContext(world_id=world_id, templates=load_templates(), work=WorkDir(work, world_id), data_root=work)
    for stage in STAGES:
        if stage.name in stages:
            run_make(stage, ctx)
            assert run_prove(stage, ctx).passed, stage.name
    return World({p.name: p.read_bytes() for p in work.iterdir() if p.is_file()})


@pytest.fixture(scope="module")
def booked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    yield _partial("event-management.regional--v001", tmp_path_factory.mktemp("booked"))


def test_a_retired_resource_is_never_booked(booked: World) -> None:
    world = booked
    tool = world.tools_by_name["create_resource_booking"]
    assert "it must be available" in tool["input_schema"]["properties"]["resource_id"]["description"]
    assert any(p["expect"] == "this action needs" for p in tool["examples"]["invalid"])  # probed at build
    with world.episode() as ep:
        states = {s: i for i, s in ep.conn.execute("SELECT id, status FROM resources ORDER BY id DESC")}
        args = {"subject_id": 1, "starts_on": world.clock, "duration_hours": 2}
        for state in ("retired", "under_maintenance"):
            step = ep.call("create_resource_booking", {**args, "resource_id": states[state]})
            assert not step.ok and f"is {state}" in (step.error or ""), step
        assert ep.written == set()
        assert ep.call("create_resource_booking", {**args, "resource_id": states["available"]}).ok
        available = {i for (i,) in ep.conn.execute("SELECT id FROM resources WHERE status = 'available'")}
    for task in world.tasks.values():  # no oracle books a resource that is out of service
        for call in task.oracle:
            if call.tool == "create_resource_booking":
                assert call.args["resource_id"] in available, task.task_id


def test_create_fills_the_record_code(tmp_path: Path) -> None:
    world = _partial("payroll.regional--v001", tmp_path, UP_TO_TASKS[:4])
    valid = world.tools_by_name["create_pay_adjustment"]["examples"]["valid"]
    with world.episode() as ep:
        (last,) = ep.conn.execute("SELECT max(id) FROM pay_adjustments").fetchone()
        made = ep.call("create_pay_adjustment", valid)
        assert made.ok, made.error
        assert made.result["pay_adjustment"]["adjustment_number"] == f"ADJ-{last + 1:05d}"  # type: ignore[index]
        found = ep.call("search_pay_adjustments", {"adjustment_number": f"ADJ-{last + 1:05d}"})
        assert found.ok and found.result["total"] == 1, found  # type: ignore[index]

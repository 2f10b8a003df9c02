"""Work that arrives by email (issue 33, item 3): request emails seeded unread in the inbox, and the
inbox family that works through one contact's requests (act, note, reply in the thread, mark read),
some declined by policy and one a repeat, graded on the final state of all of them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.test_packs import _break, _templates
from tests.test_serving import Server
from worldfactory.briefs import expand_world
from worldfactory.generate.data import build_seed_db
from worldfactory.generate.inbox import plan_inbox
from worldfactory.generate.schema import build_spec
from worldfactory.generate.validity import check_task
from worldfactory.policies.base import run_policy
from worldfactory.runtime.world import World
from worldfactory.seeds import stage_rng
from worldfactory.spec import ACTOR_ID, PARTY_TABLES, Task, ToolCall
from worldfactory.templates import TemplateError, load_templates

WORLD = "insurance-claims.regional--v001"


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


def _inbox(world: World) -> list[Task]:
    return [t for t in world.tasks.values() if t.family == "inbox"]


def _seed(world: World) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(world.seed_image)
    return conn


def test_requests_are_seeded_unread_and_planned_again_from_the_seed(worlds: dict[str, World]) -> None:
    for world in worlds.values():
        conn = _seed(world)
        groups = plan_inbox(world.spec, conn)
        assert len(groups) >= 4, world.world_id
        kinds = [r.kind for g in groups for r in g.requests]
        assert {"act", "decline", "duplicate"} <= set(kinds), world.world_id
        unread = list(conn.execute("SELECT subject, contact_id, sender_id, folder FROM emails WHERE unread = 1 "
                                   "ORDER BY id"))
        assert unread == [(r.subject, None if g.staff else g.sender["id"], g.sender["id"] if g.staff else ACTOR_ID,
                           "inbox") for g in groups for r in g.requests if r.channel == "email"]
        phoned = [(g.logger["id"], r.row["id"]) for g in groups for r in g.requests if r.channel == "note"
                  if g.logger is not None]
        assert len(phoned) == 2, world.world_id  # logged by a colleague on the record each is about
        assert phoned == list(conn.execute("SELECT author_id, subject_id FROM notes WHERE body LIKE "
                                           "'Phone message:%' ORDER BY id"))
        last = [g for g in groups if g.last]
        assert [r.kind for g in last for r in g.requests] == ["act", "decline"], world.world_id
        for g in last:  # the request is the contact's latest email, after their earlier one
            by = "sender_id = ? AND contact_id IS NULL" if g.staff else "contact_id = ?"  # a colleague's: to us
            latest = list(conn.execute(f"SELECT subject, unread FROM emails WHERE {by} ORDER BY sent_on "
                                       "DESC, id DESC LIMIT 2", (g.sender["id"],)))
            assert g.earlier is not None and latest == [(g.requests[0].subject, 1), (g.earlier[0], 0)]
        assert len(_inbox(world)) == len(groups)
    world = worlds[WORLD]  # deterministic: the same seed bytes again
    vocab = load_templates().vocabulary
    assert build_seed_db(world.spec, vocab) == world.seed_image


def _solve(world: World, task: Task, calls: list[ToolCall]) -> bool:
    with world.episode(task.task_id) as ep:
        for call in calls:
            ep.call(call.tool, call.args)
        return ep.verify(task.answer).passed


def test_inbox_tasks_are_proven(world: World) -> None:
    """The oracle passes, nothing fails, every mutant is caught (ignore_decline among them), valid alternatives
    pass (the emails handled in another order, replies worded otherwise); a reply left out of its thread, a
    second note for a repeated request and an email left unread each fail."""
    rng = stage_rng(world.brief.generation_seed, "validity")
    declined = 0
    for task in _inbox(world):
        report = check_task(world, task, rng)
        assert report.oracle_passes and report.null_fails and not report.problems, report.problems
        # caught, or (a request whose tool refuses it, and no note to show it was tried) the same end state
        caught = [m for m in report.mutants if m.kind == "ignore_decline" and not m.equivalent]
        assert all(not m.passed for m in caught)
        declined += bool(caught)
        assert run_policy(world, task.task_id, "ignores_declines").verdict.passed is not bool(caught)
        per_email = _per_email(task.oracle)
        assert _solve(world, task, [c for block in reversed(per_email) for c in block])  # another order
        reworded = [ToolCall(tool=c.tool, args={**c.args, "body": "Handled, see the record."})
                    if c.tool == "create_email" else c for c in task.oracle]
        assert _solve(world, task, reworded)  # reply and note texts only need to exist
        unthreaded = [ToolCall(tool=c.tool, args={k: v for k, v in c.args.items() if k != "in_reply_to"})
                      if c.tool == "create_email" else c for c in task.oracle]
        assert not _solve(world, task, unthreaded)
        last = max(i for i, c in enumerate(task.oracle) if c.tool == "update_email")
        assert not _solve(world, task, task.oracle[:last] + task.oracle[last + 1:])  # one email left unread
    assert declined >= 2  # half the groups carry a decline or a repeat


def _per_email(oracle: list[ToolCall]) -> list[list[ToolCall]]:
    """The oracle's calls cut into one block per email (from its get_email to its update_email), after the
    shared lookups: blocks on different records are independent."""
    head: list[ToolCall] = []
    blocks: list[list[ToolCall]] = []
    for call in oracle:
        if call.tool == "get_email":
            blocks.append([])
        (blocks[-1] if blocks else head).append(call)
    return [head + blocks[0], *blocks[1:]] if blocks else [head]


async def _solve_over_mcp(url: str, task: Task) -> None:
    async with Client(url) as client:
        for call in task.oracle:
            r = await client.call_tool(call.tool, call.args)
            assert not r.is_error, (call, r.content)


def test_inbox_task_over_http_is_graded_on_every_module(world: World) -> None:
    """Solved through the served world's control plane and MCP, the verdict passes; replying to the wrong
    email (the thread of another request) fails on the emails table alone."""
    import httpx2

    task = next(t for t in _inbox(world) if t.declined_calls
                and sum(c.tool == "update_email" for c in t.oracle) >= 2)
    auth = {"authorization": "Bearer test-token"}
    with Server(world) as server, httpx2.Client(base_url=server.url, timeout=30) as http:
        made = http.post("/control/episodes", json={"task_id": task.task_id}, headers=auth).json()
        anyio.run(_solve_over_mcp, server.url + made["mcp_url"], task)
        verdict: dict[str, Any] = http.post(f"/control/episodes/{made['episode_id']}/verify", json={},
                                            headers=auth).json()
        assert verdict["passed"], verdict["mismatches"]
    replies = [c for c in task.oracle if c.tool == "create_email"]
    swapped = {id(replies[0]): replies[1].args["in_reply_to"], id(replies[1]): replies[0].args["in_reply_to"]}
    crossed = [ToolCall(tool=c.tool, args={**c.args, "in_reply_to": swapped[id(c)]}) if id(c) in swapped else c
               for c in task.oracle]
    with world.episode(task.task_id) as ep:
        for call in crossed:
            ep.call(call.tool, call.args)
        verdict2 = ep.verify(task.answer)
    assert not verdict2.passed and {m.table for m in verdict2.mismatches} == {"emails"}


def _last(world: World) -> list[Task]:
    return [t for t in _inbox(world) if "last email" in t.instruction or "most recent email" in t.instruction]


def test_last_email_tasks_grade_the_record_the_reply_and_the_note(world: World) -> None:
    """"The last email from <contact>": the oracle passes and its mutants are caught; leaving out the note
    (asked for whatever was decided), replying in the earlier email's thread, or acting on the request a
    rule forbids each fail."""
    rng = stage_rng(world.brief.generation_seed, "validity")
    tasks = _last(world)
    assert len(tasks) == 2 and any(t.declined_calls for t in tasks)
    conn = _seed(world)
    for task in tasks:
        report = check_task(world, task, rng)
        assert report.oracle_passes and report.null_fails and not report.problems, report.problems
        assert not _solve(world, task, [c for c in task.oracle if c.tool != "create_note"])
        reply = next(c for c in task.oracle if c.tool == "create_email")
        (by, sid), = next(c for c in task.oracle if c.tool == "search_emails").args.items()  # the sender
        earlier = conn.execute(f"SELECT id FROM emails WHERE {by} = ? AND unread = 0 AND subject LIKE "
                               "'Thank you from %' ORDER BY sent_on DESC LIMIT 1", (sid,)).fetchone()[0]
        wrong = [ToolCall(tool=c.tool, args={**c.args, "in_reply_to": earlier}) if c is reply else c
                 for c in task.oracle]
        assert not _solve(world, task, wrong)
        if task.declined_calls:  # the step the rule forbids: the tool refuses it, or the verifier fails it
            act = [c for c in task.declined_calls if c.tool != "create_note"]
            with world.episode(task.task_id) as ep:
                for call in task.oracle[:-3]:
                    ep.call(call.tool, call.args)
                refused = all(ep.call(c.tool, c.args).error for c in act)
                for call in task.oracle[-3:]:
                    ep.call(call.tool, call.args)
                assert ep.verify(task.answer).passed is refused


def test_phoned_in_requests_are_found_in_notes_and_answered_by_email(world: World) -> None:
    """Two inbox tasks carry a request a colleague logged as a note: leaving it undone fails, and so does
    answering it without the step; the reply has no thread and its subject repeats the note's first line."""
    tasks = [t for t in _inbox(world) if "phone message" in t.instruction]
    assert len(tasks) == 2
    for task in tasks:
        reply = next(c for c in task.oracle if c.tool == "create_email" and "in_reply_to" not in c.args)
        assert reply.args["subject"].startswith("Re: Phone message: ")
        i = task.oracle.index(reply)
        step = next(j for j in range(i - 1, 0, -1) if task.oracle[j].tool not in ("create_note",)
                    and not task.oracle[j].tool.startswith(("get_", "search_")))
        assert not _solve(world, task, task.oracle[:step] + task.oracle[step + 1:])  # step not taken
        assert not _solve(world, task, [c for c in task.oracle if c is not reply])  # no reply
        assert _solve(world, task, task.oracle)


def _planned(world_id: str) -> tuple[Any, list[Any]]:
    """A catalog world's inbox plan, straight from the generator (no build)."""
    templates = load_templates()
    spec = build_spec(expand_world(world_id, templates), templates)
    conn = sqlite3.connect(":memory:")
    conn.deserialize(build_seed_db(spec, templates.vocabulary))
    return conn, plan_inbox(spec, conn)


def test_back_office_requests_come_from_colleagues() -> None:
    """Issue 31: in payroll no CRM contact (a customer's buyer or counsel) asks us to issue, void or stop a
    paycheck; a colleague does, by an email from them to our address, answered at that address."""
    _, groups = _planned("payroll.regional--v001")
    asked = [(g, r) for g in groups for r in g.requests]
    assert {r.transition.name for _, r in asked} & {"issue_paycheck", "void_paycheck", "stop_payment_on_paycheck"}
    assert all(g.staff for g, _ in asked), [(g.sender["full_name"], r.verb) for g, r in asked if not g.staff]
    assert len({g.sender["id"] for g in groups}) == len(groups)  # one colleague per group
    assert all(g.logger is None or g.logger["id"] != g.sender["id"] for g in groups)  # another took the call


def test_a_party_asks_only_for_its_own_records_steps() -> None:
    """Where a pack marks a step `requested_by: party` (a shipper cancels its load), the request comes from a
    contact of the record's account; every other request comes from a colleague."""
    conn, groups = _planned("freight-dispatch.regional--v001")
    asked = [(g, r) for g in groups for r in g.requests]
    assert any(not g.staff for g, _ in asked) and any(g.staff for g, _ in asked)
    for g, r in asked:
        party = r.transition.requested_by == "party"
        assert g.staff is not party, (g.sender["full_name"], r.verb)
        if party:
            account = conn.execute("SELECT account_id FROM contacts WHERE id = ?", (g.sender["id"],)).fetchone()[0]
            assert account == r.row["account_id"], r.verb


def test_a_party_step_needs_a_party_column(tmp_path: Path) -> None:
    """`requested_by: party` on a table with no contact or account column fails, naming the file and step."""
    root = _templates(tmp_path)
    path = _break(root, "        - name: start_claim_review\n",
                  "        - name: start_claim_review\n          requested_by: party\n")
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    assert f"{path}: field 'tables[2:claims]'" in str(err.value)
    assert "transition 'start_claim_review': requested_by: party" in str(err.value)
    assert all(t in str(err.value) for t in PARTY_TABLES)

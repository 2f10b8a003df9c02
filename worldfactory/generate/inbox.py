"""Work that arrives by email: request emails seeded unread in the inbox, and what each one needs.

A world with email, contacts and notes gets GROUPS groups of requests, each from one contact: a
request to act on a record (a workflow step its guards allow), in half the groups one that a business
rule forbids (to be declined: a reply, no change), and in some a duplicate of the first (a follow-up
asking the same again: done once). The seed stage inserts them (unread, in the inbox, addressed to
the acting user); the tasks stage plans the inbox family from the same plan (generate/tasks/inbox.py).

The plan reads only tables the seeding does not write (the anchor, the guarded tables, contacts) and
draws from its own stream, so both stages compute the same plan from the seed and no other task's
draws move. Each email is found again by its subject, which is unique.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from worldfactory.seeds import stage_rng
from worldfactory.spec import TableDef, Transition, WorldSpec

from .data import fetch_dicts
from .workflow import guards_hold, render_verb, task_value, with_related

GROUPS = 6  # inbox tasks per world: one per group
DECLINE_EVERY = 2  # groups 0, 2, 4 carry a request a rule forbids
DUPLICATE_IN = (1, 4)  # these groups carry a follow-up that repeats their first request
NEEDED_TOOLS = ("search_contacts", "search_emails", "get_email", "create_email", "update_email")
ACTOR_ID = 1  # the acting user (ToolDB's actor): the inbox is theirs

Kind = Literal["act", "decline", "duplicate"]


@dataclass
class Request:
    """One seeded email and the step it asks for."""

    kind: Kind
    table: TableDef
    transition: Transition
    row: dict[str, Any]
    args: dict[str, Any]
    verb: str  # what the email asks, in words ("approve claim CLM-000204 for $4,200.00")
    subject: str
    body: str
    sent_on: str
    rule: str | None = None  # the rule that forbids a declined request


@dataclass
class Group:
    """The requests one contact sent, in the order they arrived."""

    contact: dict[str, Any]
    requests: list[Request] = field(default_factory=list)


def usable(spec: WorldSpec) -> bool:
    """Whether the world can hold inbox work: email with threads and read marks, contacts, their tools."""
    names = {t.name for t in spec.tables}
    if not {"emails", "contacts"} <= names:
        return False
    cols = {c.name for c in spec.table("emails").columns}
    omitted = set(spec.brief.omitted_tools)
    return {"unread", "in_reply_to", "folder"} <= cols and not omitted & set(NEEDED_TOOLS)


def _labelled(table: TableDef) -> bool:
    return bool(table.label) and any(c.name == table.label and c.unique for c in table.columns)


def _steps(spec: WorldSpec, tables: list[TableDef]) -> list[tuple[TableDef, Transition]]:
    """Transitions with a tool in this world, on labelled tables, that name no other record."""
    omitted = set(spec.brief.omitted_tools)
    return [(t, tr) for t in tables if t.workflow and _labelled(t) for tr in t.workflow.transitions
            if tr.name not in omitted and not any(p.ref for p in tr.params)]


def plan_inbox(spec: WorldSpec, conn: sqlite3.Connection) -> list[Group]:
    """The world's inbox requests, deterministic for its seed (empty where the world cannot hold them)."""
    if not usable(spec):
        return []
    rng = stage_rng(spec.brief.generation_seed, "inbox")
    rules = spec.brief.rules
    names = {t.name for t in spec.tables}
    anchor = spec.table(spec.anchor)
    tables = {t.name: t for t in spec.tables}
    acts: list[tuple[TableDef, Transition, dict[str, Any], dict[str, Any]]] = []
    declines: list[tuple[TableDef, Transition, dict[str, Any], dict[str, Any], str]] = []
    for table, tr in _steps(spec, [anchor]):
        assert table.workflow is not None
        marks = ", ".join("?" * len(tr.from_))
        for row in with_related(conn, tables, table, fetch_dicts(
                conn, f"SELECT * FROM {table.name} WHERE {table.workflow.column} IN ({marks}) ORDER BY id",
                tuple(tr.from_))):
            args = {p.name: task_value(p, row, rng) for p in tr.params}
            if guards_hold(tr, row, args, rules):
                acts.append((table, tr, row, args))
    for table, tr in _steps(spec, list(spec.tables)):
        assert table.workflow is not None
        rule_guards = [g for g in tr.guards if g.rule]
        if not rule_guards:
            continue
        others = tr.model_copy(update={"guards": [g for g in tr.guards if not g.rule]})
        marks = ", ".join("?" * len(tr.from_))
        for row in with_related(conn, tables, table, fetch_dicts(
                conn, f"SELECT * FROM {table.name} WHERE {table.workflow.column} IN ({marks}) ORDER BY id",
                tuple(tr.from_))):
            args = {p.name: task_value(p, row, rng) for p in tr.params}
            failing = [g for g in rule_guards
                       if not guards_hold(tr.model_copy(update={"guards": [g]}), row, args, rules)]
            if failing and guards_hold(others, row, args, rules) and failing[0].rule:
                declines.append((table, tr, row, args, failing[0].rule))
    contacts = fetch_dicts(conn, "SELECT * FROM contacts ORDER BY id")
    if not acts or not contacts:
        return []
    rng.shuffle(acts)
    rng.shuffle(declines)
    # Declines on the anchor first (in their shuffled order): a careless agent notes what it did on an anchor
    # record, so ignoring the rule shows in the end state; elsewhere the tool's refusal leaves nothing.
    declines.sort(key=lambda d: d[0].name != anchor.name)
    rng.shuffle(contacts)
    today = date.fromisoformat(spec.brief.clock)
    actor = fetch_dicts(conn, "SELECT * FROM users WHERE id = ?", (ACTOR_ID,)) if "users" in names else []
    # An email comes after the records it refers to (the realism audit): its contact's and its user's dates.
    after = _latest(spec.table("users"), actor[0]) if actor else None
    if after is not None and after >= today.isoformat():
        return []
    contacts = [c for c in contacts if (_latest(spec.table("contacts"), c) or "") < today.isoformat()]
    used: set[tuple[str, int]] = set()
    groups: list[Group] = []
    for i in range(GROUPS):
        act = next((a for a in acts if (a[0].name, a[2]["id"]) not in used), None)
        if act is None or i >= len(contacts):
            break
        group = Group(contact=contacts[i])
        name = str(contacts[i].get("full_name") or "")
        day = today - timedelta(days=rng.randint(2, 6))
        floor = max(d for d in (after, _latest(spec.table("contacts"), contacts[i]), "") if d is not None)
        day = max(day, date.fromisoformat(floor)) if floor else day
        wanted: list[tuple[Kind, Any]] = [("act", act)]
        if i % DECLINE_EVERY == 0:
            decline = next((d for d in declines if (d[0].name, d[2]["id"]) not in used
                            and (d[0].name, d[2]["id"]) != (act[0].name, act[2]["id"])), None)
            if decline is not None:
                wanted.insert(rng.randint(0, 1), ("decline", decline))
        if i in DUPLICATE_IN:
            wanted.append(("duplicate", act))
        for kind, found in wanted:
            table, tr, row, args = found[:4]
            used.add((table.name, row["id"]))
            label = row[table.label or ""]
            verb = render_verb(tr, f"{table.singular} {label}", args)
            if kind == "duplicate":
                subject = f"Following up: {verb}"
                body = (f"Hello,\n\nI wrote earlier and have not heard back: could you please {verb}? "
                        f"If it is already done, just let me know.\n\n{name}")
            else:
                subject = f"Request: {verb}"
                body = f"Hello,\n\nCould you please {verb}? Thank you.\n\n{name}"
            group.requests.append(Request(kind=kind, table=table, transition=tr, row=row, args=args, verb=verb,
                                          subject=subject, body=body, sent_on=day.isoformat(),
                                          rule=found[4] if kind == "decline" else None))
            day = min(today, day + timedelta(days=1))
        groups.append(group)
    return groups


def _latest(table: TableDef, row: dict[str, Any]) -> str | None:
    """The row's latest date (ISO text compares in date order), or None."""
    days = [str(row[c.name]) for c in table.columns if c.type == "date" and row.get(c.name)]
    return max(days) if days else None


def seed_inbox(spec: WorldSpec, conn: sqlite3.Connection) -> int:
    """Insert the planned request emails (unread, in the acting user's inbox); the number inserted."""
    groups = plan_inbox(spec, conn)
    table = spec.table("emails") if groups else None
    if table is None:
        return 0
    cols = ["id"] + [c.name for c in table.columns]
    next_id = int(conn.execute("SELECT coalesce(max(id), 0) FROM emails").fetchone()[0]) + 1
    rows = []
    for group in groups:
        for req in group.requests:
            values = {"id": next_id, "subject": req.subject, "body": req.body, "sender_id": ACTOR_ID,
                      "contact_id": group.contact["id"], "to_address": None, "folder": "inbox",
                      "sent_on": req.sent_on, "unread": 1, "in_reply_to": None}
            rows.append([values.get(c) for c in cols])
            next_id += 1
    conn.executemany(f"INSERT INTO emails ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
    return len(rows)

"""Work that arrives by email and by note: request emails seeded unread in the inbox, phone messages a
colleague logged as notes, and what each one needs.

A world with email, contacts and notes gets GROUPS groups of requests, each from one sender: a colleague
for back-office steps, or for a step its pack marks `requested_by: party` the record's own party (a CRM
contact it refers to, or one of its account's), so nobody asks for what they would never ask (a buyer
asking payroll to issue a paycheck). A group holds only requests its sender would make: a
request to act on a record (a workflow step its guards allow), in half the groups one that a business
rule forbids (to be declined: a reply, no change), and in some a duplicate of the first (a follow-up
asking the same again: done once). In the PHONED_IN groups one more request came by phone: a colleague
(the group's ``logger``) logged it as a note on the record it is about, and the reply goes by email.
Then LAST_GROUPS groups of one request each, the sender's last email (dated on the world's clock,
after an earlier email of theirs that asks nothing): one to act on, one a rule forbids where there is one.
The seed stage inserts them (emails unread, in the inbox, addressed to the acting user: a colleague's
with their id as sender and our address as recipient); the tasks stage
plans the inbox family from the same plan (generate/tasks/inbox.py).

The plan reads only tables the seeding does not write (the anchor, the guarded tables, contacts, users) and
draws from its own stream, so both stages compute the same plan from the seed and no other task's
draws move. Each email is found again by its subject, which is unique.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from worldfactory.seeds import stage_rng
from worldfactory.spec import ACTOR_ID, TableDef, Transition, WorldSpec

from .handbook import in_band, steps_by_name
from .rows import fetch_dicts
from .workflow import guards_hold, render_verb, task_value, with_related

GROUPS = 6  # inbox tasks per world: one per group
DECLINE_EVERY = 2  # groups 0, 2, 4 carry a request a rule forbids
DUPLICATE_IN = (1, 4)  # these groups carry a follow-up that repeats their first request
PHONED_IN = (2, 3)  # these groups carry one more request, phoned in and logged as a note
LAST_GROUPS = 2  # "the last email from <sender>" tasks: one to act on, one to decline where a rule allows
NEEDED_TOOLS = ("search_contacts", "search_emails", "get_email", "create_email", "update_email")

Kind = Literal["act", "decline", "duplicate"]
Channel = Literal["email", "note"]


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
    channel: Channel = "email"  # "note": phoned in, logged as a note on the record by the group's logger


@dataclass
class Group:
    """The requests one sender sent, in the order they arrived."""

    sender: dict[str, Any]  # a CRM contact's row, or (staff) a colleague's: a users row
    staff: bool = False  # a colleague's requests (emails from them to us), not a contact's
    requests: list[Request] = field(default_factory=list)
    logger: dict[str, Any] | None = None  # the colleague who logged its phoned-in request, if any
    last: bool = False  # a "last email" group: one request, after an earlier email that asks nothing
    earlier: tuple[str, str, str] | None = None  # that earlier email: subject, body, date


def phone_subject(verb: str) -> str:
    """A phone message note's first line, which its reply's subject repeats after "Re: "."""
    return f"Phone message: {verb}"


def usable(spec: WorldSpec) -> bool:
    """Whether the world can hold inbox work: email with threads and read marks, contacts, their tools."""
    names = {t.name for t in spec.tables}
    if not {"emails", "contacts"} <= names:
        return False
    cols = {c.name for c in spec.table("emails").columns}
    omitted = set(spec.brief.omitted_tools)
    return {"unread", "in_reply_to", "folder"} <= cols and not omitted & set(NEEDED_TOOLS)


def notes_usable(spec: WorldSpec) -> bool:
    """Whether requests can be phoned in: notes on the anchor with an author, their tools, and users."""
    if not spec.has_table("notes") or not spec.has_table("users"):
        return False
    cols = {c.name: c for c in spec.table("notes").columns}
    omitted = set(spec.brief.omitted_tools)
    return ("author_id" in cols and "subject_id" in cols and cols["subject_id"].ref == spec.anchor
            and not omitted & {"create_note", "search_notes", "search_users"})


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
    # a request the tool allows but the handbook's near-limit exception forbids is not one to act on: the
    # instruction's rule (what the tools refuse) and the handbook would disagree about it
    banded = steps_by_name(spec, conn)
    for table, tr in _steps(spec, [anchor]):
        assert table.workflow is not None
        marks = ", ".join("?" * len(tr.from_))
        for row in with_related(conn, tables, table, fetch_dicts(
                conn, f"SELECT * FROM {table.name} WHERE {table.workflow.column} IN ({marks}) ORDER BY id",
                tuple(tr.from_))):
            args = {p.name: task_value(p, row, rng) for p in tr.params}
            if guards_hold(tr, row, args, rules) and not (tr.name in banded and in_band(banded[tr.name], row, args,
                                                                                        rules)):
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
    today = date.fromisoformat(spec.brief.clock)
    actor = fetch_dicts(conn, "SELECT * FROM users WHERE id = ?", (ACTOR_ID,)) if "users" in names else []
    # An email comes after the records it refers to (the realism audit): its sender's and its user's dates.
    after = _latest(spec.table("users"), actor[0]) if actor else None
    if after is not None and after >= today.isoformat():
        return []
    by_id = {c["id"]: c for c in contacts if (_latest(spec.table("contacts"), c) or "") < today.isoformat()}
    colleagues = [u for u in fetch_dicts(conn, "SELECT * FROM users WHERE id != ? AND active = 1 ORDER BY id",
                                         (ACTOR_ID,))
                  if (_latest(spec.table("users"), u) or "") < today.isoformat()] if actor else []
    loggers = list(colleagues) if notes_usable(spec) else []
    rng.shuffle(colleagues)
    used: set[tuple[str, int]] = set()
    groups: list[Group] = []
    senders: set[tuple[bool, int]] = set()  # (staff, id): each group has its own sender
    quiet = {(False, c) for c in _quiet(conn, today, "contact_id")} | {(True, u) for u in _quiet(conn, today,
                                                                                                 "sender_id")}
    parties = {(a[0].name, a[1].name, a[2]["id"]): _party(conn, a[0], a[1], a[2]) for a in (*acts, *declines)}

    def fits(found: tuple[Any, ...], group: Group) -> bool:
        """Whether the request is one the group's sender would make: a colleague asks for back-office steps,
        a record's party for the steps it asks for on its own records."""
        ids = parties[(found[0].name, found[1].name, found[2]["id"])]
        return group.sender["id"] in ids if not group.staff else not ids

    def sender_of(found: tuple[Any, ...], last: bool) -> tuple[bool, dict[str, Any]] | None:
        """Who sends the request: the record's party where its step is theirs to ask, else a colleague."""
        ids = parties[(found[0].name, found[1].name, found[2]["id"])]
        pool = [(False, by_id[c]) for c in ids if c in by_id] if ids else [(True, u) for u in colleagues]
        return next(((staff, s) for staff, s in pool if (staff, s["id"]) not in senders
                     and (not last or (staff, s["id"]) in quiet)), None)

    for i in range(GROUPS + LAST_GROUPS):
        last = i >= GROUPS
        picked = next(((a, who) for a in acts if (a[0].name, a[2]["id"]) not in used
                       for who in [sender_of(a, last)] if who is not None), None)
        if picked is None:
            break
        if last and i > GROUPS:  # this one carries only a decline: its sender is the decline's
            picked = next(((picked[0], who) for d in declines if (d[0].name, d[2]["id"]) not in used
                           and d[0].name == anchor.name for who in [sender_of(d, last)] if who is not None), picked)
        act, (staff, sender) = picked
        senders.add((staff, sender["id"]))
        group = Group(sender=sender, staff=staff, last=last)
        name = str(sender.get("full_name") or "")
        day = today - timedelta(days=rng.randint(2, 6))
        floor = max(d for d in (after, _latest(spec.table("users" if staff else "contacts"), sender), "")
                    if d is not None)
        day = max(day, date.fromisoformat(floor)) if floor else day
        wanted: list[tuple[Kind, Any, Channel]] = [("act", act, "email")]
        if (i % DECLINE_EVERY == 0 and not last) or (last and i > GROUPS):
            decline = next((d for d in declines if (d[0].name, d[2]["id"]) not in used
                            and (d[0].name, d[2]["id"]) != (act[0].name, act[2]["id"]) and fits(d, group)
                            and (not last or d[0].name == anchor.name)), None)
            if decline is not None and last:
                wanted = [("decline", decline, "email")]
            elif decline is not None:
                wanted.insert(rng.randint(0, 1), ("decline", decline, "email"))
        if i in DUPLICATE_IN:
            wanted.append(("duplicate", act, "email"))
        others = [u for u in loggers if not (staff and u["id"] == sender["id"])]
        if i in PHONED_IN and others:
            phoned = next((a for a in acts if (a[0].name, a[2]["id"]) not in used
                           and (a[0].name, a[2]["id"]) != (act[0].name, act[2]["id"]) and fits(a, group)), None)
            logger = others[rng.randrange(len(others))]
            note_floor = max(d for d in (_latest(spec.table("users"), logger),
                                         phoned and _latest(phoned[0], phoned[2]), "") if d is not None)
            if phoned is not None and note_floor < today.isoformat():
                group.logger = logger
                wanted.insert(rng.randint(0, len(wanted)), ("act", phoned, "note"))
        if last:
            day = today
            before = (today - timedelta(days=rng.randint(3, 9))).isoformat()
            before = min(max(before, floor or before), today.isoformat())  # not before the sender exists
            group.earlier = (f"Thank you from {name}, {before}",
                             f"Hello,\n\nThank you for your help last time; nothing else is needed on that.\n\n{name}",
                             before)
        for kind, found, channel in wanted:
            table, tr, row, args = found[:4]
            used.add((table.name, row["id"]))
            label = row[table.label or ""]
            verb = render_verb(tr, f"{table.singular} {label}", args)
            if channel == "note":
                assert group.logger is not None
                note_day = max(day, date.fromisoformat(note_floor)) if note_floor else day
                group.requests.append(Request(
                    kind=kind, table=table, transition=tr, row=row, args=args, verb=verb,
                    subject=phone_subject(verb), sent_on=min(today, note_day).isoformat(), channel="note",
                    body=f"{phone_subject(verb)}\n{name} called and asked us to {verb}; "
                         f"please reply to them by email. ({group.logger.get('full_name')})"))
                continue
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


def _quiet(conn: sqlite3.Connection, today: date, column: str) -> list[int]:
    """Senders (contacts by contact_id, colleagues by sender_id) with no email dated in the last ten days: a
    request on the clock's day is their last email, and the earlier one seeded before it stays their only
    other recent one. The emails this module seeds (unread requests, the earlier "Thank you from" ones) do
    not count, so the tasks stage, reading the seeded image, plans the same as the seed stage did."""
    since = (today - timedelta(days=10)).isoformat()
    table = "contacts" if column == "contact_id" else "users"
    return [int(r[0]) for r in conn.execute(
        f"SELECT id FROM {table} c WHERE NOT EXISTS (SELECT 1 FROM emails e WHERE e.{column} = c.id "
        "AND e.sent_on >= ? AND e.unread = 0 AND e.subject NOT LIKE 'Thank you from %') ORDER BY id", (since,))]


def _party(conn: sqlite3.Connection, table: TableDef, tr: Transition, row: dict[str, Any]) -> list[int]:
    """The contacts who would ask for this step on this record: for a step its pack says the record's party
    requests, the contact it refers to or the contacts of its account; empty where a colleague asks."""
    if tr.requested_by != "party":
        return []
    for col in table.columns:
        if col.ref == "contacts" and row.get(col.name) is not None:
            return [int(row[col.name])]
    for col in table.columns:
        if col.ref == "accounts" and row.get(col.name) is not None:
            return [int(r[0]) for r in conn.execute("SELECT id FROM contacts WHERE account_id = ? ORDER BY id",
                                                    (row[col.name],))]
    return []


def _latest(table: TableDef, row: dict[str, Any]) -> str | None:
    """The row's latest date (ISO text compares in date order), or None."""
    days = [str(row[c.name]) for c in table.columns if c.type == "date" and row.get(c.name)]
    return max(days) if days else None


def seed_inbox(spec: WorldSpec, conn: sqlite3.Connection) -> int:
    """Insert the planned requests: emails unread in the acting user's inbox (a last-email group's earlier
    email read), phone messages as notes by their logger; the number of emails and notes inserted."""
    groups = plan_inbox(spec, conn)
    table = spec.table("emails") if groups else None
    if table is None:
        return 0
    actor = fetch_dicts(conn, "SELECT * FROM users WHERE id = ?", (ACTOR_ID,))[0]
    cols = ["id"] + [c.name for c in table.columns]
    next_id = int(conn.execute("SELECT coalesce(max(id), 0) FROM emails").fetchone()[0]) + 1
    rows = []
    note_cols = ["id"] + [c.name for c in spec.table("notes").columns] if spec.has_table("notes") else []
    next_note = int(conn.execute("SELECT coalesce(max(id), 0) FROM notes").fetchone()[0]) + 1 if note_cols else 0
    notes = []
    for group in groups:
        # a contact's email: in our inbox, from them; a colleague's: sent by them to our address
        base = ({"sender_id": group.sender["id"], "contact_id": None, "to_address": actor["email"]} if group.staff
                else {"sender_id": ACTOR_ID, "contact_id": group.sender["id"], "to_address": None})
        base.update({"folder": "inbox", "in_reply_to": None})
        if group.earlier is not None:
            subject, body, day = group.earlier
            rows.append([{**base, "id": next_id, "subject": subject, "body": body, "sent_on": day,
                          "unread": 0}.get(c) for c in cols])
            next_id += 1
        for req in group.requests:
            if req.channel == "note":
                assert group.logger is not None
                values = {"id": next_note, "subject_id": req.row["id"], "author_id": group.logger["id"],
                          "body": req.body, "created_on": req.sent_on}
                notes.append([values.get(c) for c in note_cols])
                next_note += 1
                continue
            values = {**base, "id": next_id, "subject": req.subject, "body": req.body, "sent_on": req.sent_on,
                      "unread": 1}
            rows.append([values.get(c) for c in cols])
            next_id += 1
    conn.executemany(f"INSERT INTO emails ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
    if notes:
        conn.executemany(f"INSERT INTO notes ({', '.join(note_cols)}) VALUES ({', '.join('?' * len(note_cols))})",
                         notes)
    return len(rows) + len(notes)

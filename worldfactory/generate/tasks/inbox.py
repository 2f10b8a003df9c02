"""inbox: work that arrives by email. The instruction names only whose unread emails to work through;
the requests themselves are seeded emails (generate/inbox.py). For each: read it, do what it asks where
the rules allow (a rule-forbidden request changes nothing; a follow-up repeating a request is not done
twice), leave one note on each record changed, reply in the email's thread, and mark it read. Graded on
the final state of all of them: the records, the notes, the replies and the read marks."""

from __future__ import annotations

from typing import Any

from worldfactory.spec import ToolCall

from ..inbox import GROUPS, NEEDED_TOOLS, Group, plan_inbox
from ..workflow import id_param
from .builder import TaskBuilder
from .driver import Plan, Stream

FAMILY = "inbox"
QUOTA = GROUPS
TRIES = None
PHRASES = [
    "Work through the unread emails from {name} in the inbox.",
    "Please handle the unread requests {name} sent to the inbox.",
]
RULES = ("For each one: do what it asks where our business rules allow it (where a rule forbids it, change "
         "nothing), and do nothing twice if a request repeats an earlier one; {note}reply in its thread (to the "
         "sender, subject \"Re: \" followed by its subject) saying what you did or why not; then mark it read.")
NOTE_CLAUSE = "leave one note on each {anchor} you change saying what you did; "
NOTE_TEXT = "Done as requested by email"
REPLY_DONE = "Done as you asked."
REPLY_DECLINED = "We cannot do this: a business rule does not allow it."
REPLY_REPEAT = "This was already done after your earlier email."


def candidates(b: TaskBuilder) -> Stream:
    """The world's inbox groups, in plan order (the plan has its own stream: nothing is drawn here)."""
    if not set(NEEDED_TOOLS) <= b.tools:
        return Stream([], shuffle=False)
    return Stream(plan_inbox(b.spec, b.conn), shuffle=False)


def _email_id(b: TaskBuilder, subject: str) -> int | None:
    found = b.conn.execute("SELECT id FROM emails WHERE subject = ? AND unread = 1", (subject,)).fetchone()
    return None if found is None else int(found[0])


def plan(b: TaskBuilder, group: Group) -> Plan | None:
    name = group.contact.get("full_name")
    if not name:
        return None
    cid = group.contact["id"]
    anchor = b.spec.table(b.spec.anchor)
    notes = "create_note" in b.tools and b.has_table("notes")
    oracle = [ToolCall(tool="search_contacts", args={"full_name": name}),
              ToolCall(tool="search_emails", args={"contact_id": cid, "unread": True})]
    declined: list[ToolCall] = []
    for req in group.requests:
        eid = _email_id(b, req.subject)
        table, tr, row = req.table, req.transition, req.row
        search = f"search_{table.name}"
        if eid is None or tr.name not in b.tools or search not in b.tools or table.label is None:
            return None
        oracle.append(ToolCall(tool="get_email", args={"email_id": eid}))
        find = [ToolCall(tool=search, args={table.label: row[table.label]}), *b.getter(table, row)]
        act = ToolCall(tool=tr.name, args={id_param(table): row["id"], **req.args})
        note = ToolCall(tool="create_note", args={"subject_id": row["id"], "body": NOTE_TEXT})
        noted = notes and table.name == anchor.name
        if req.kind == "act":
            oracle += [*find, act, *([note] if noted else [])]
            reply = REPLY_DONE
        elif req.kind == "decline":
            if req.rule is None or "search_business_rules" not in b.tools:
                return None
            oracle += [*find, ToolCall(tool="search_business_rules", args={"name": req.rule})]
            declined += [act, *([note] if noted else [])]
            reply = REPLY_DECLINED
        else:  # a follow-up: already done; a second note would be collateral
            reply = REPLY_REPEAT
            if noted:
                declined.append(note)
        oracle.append(ToolCall(tool="create_email", args={"subject": f"Re: {req.subject}", "body": reply,
                                                          "contact_id": cid, "in_reply_to": eid}))
        oracle.append(ToolCall(tool="update_email", args={"email_id": eid, "unread": False}))
    phrase = PHRASES[len(b.tasks) % len(PHRASES)]
    text = (phrase.format(name=name) + " "
            + RULES.format(note=NOTE_CLAUSE.format(anchor=anchor.singular) if notes else ""))
    return Plan(text, oracle, anchor.name, declined_calls=declined)


def describe(group: Group) -> list[dict[str, Any]]:
    """The group's requests as data (tests and the world page read them)."""
    return [{"kind": r.kind, "subject": r.subject, "record": r.row.get(r.table.label or "id"), "rule": r.rule}
            for r in group.requests]

"""inbox: work that arrives by email. The instruction names only whose unread emails to work through
(and, in some, the phone message a colleague logged as a note), or only "the last email from <contact>";
the requests themselves are seeded emails and notes (generate/inbox.py). For each: read it, do what it
asks where the rules allow (a rule-forbidden request changes nothing; a follow-up repeating a request is
not done twice), leave one note on each record changed, reply in the email's thread (a phone message: by
email, its subject "Re: " and the note's first line), and mark it read. A last-email task wants a note on
the record whatever was decided. Graded on the final state of all of them: the records, the notes, the
replies and the read marks."""

from __future__ import annotations

from typing import Any

from worldfactory.spec import ToolCall

from ..inbox import GROUPS, LAST_GROUPS, NEEDED_TOOLS, Group, plan_inbox
from ..workflow import id_param
from .builder import TaskBuilder
from .driver import Plan, Stream

FAMILY = "inbox"
QUOTA = GROUPS + LAST_GROUPS
TRIES = None
PHRASES = [
    "Work through the unread emails from {name} in the inbox.",
    "Please handle the unread requests {name} sent to the inbox.",
]
# one parenthesis: which rules count, and what a forbidden request gets (two in a row read as an aside to an aside)
RULE_SCOPE = ("(a business rule forbids a request only where the description of the tool it needs names "
              "that rule; where one does, change nothing)")
RULES = ("For each one: do what it asks where our business rules allow it " + RULE_SCOPE + ", and do nothing "
         "twice if a request repeats an earlier one; {note}reply in its "
         "thread (to the sender, subject \"Re: \" followed by its subject) saying what you did or why not; then mark "
         "it read.")
NOTE_CLAUSE = "leave one note on each {anchor} you change saying what you did; "
PHONED = (" {logger} also took a phone message from them and logged it as a note on the {anchor} it is about "
          "(the note starts \"Phone message:\"): handle it the same way, but reply by email with the subject "
          "\"Re: \" followed by the note's first line (no thread, nothing to mark read).")
LAST_PHRASES = [
    "Handle the last email {name} sent us.",
    "Deal with {name}'s most recent email.",
]
LAST_RULES = ("Do what it asks where our business rules allow it " + RULE_SCOPE + "; leave one note on the "
              "{anchor} it is about saying what you did or why not; reply in its thread (to the "
              "sender, subject \"Re: \" followed by its subject) saying the same; then mark it read.")
NOTE_DECLINED = "Declined as requested by email: a business rule does not allow it"
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
    name = group.sender.get("full_name")
    if not name:
        return None
    sid = group.sender["id"]
    anchor = b.spec.table(b.spec.anchor)
    notes = "create_note" in b.tools and b.has_table("notes")
    if group.last and not notes:
        return None
    if group.staff and "search_users" not in b.tools:
        return None
    # a colleague's emails carry their id as sender; a reply goes to their address
    who, by = ("search_users", "sender_id") if group.staff else ("search_contacts", "contact_id")
    to = {"to_address": group.sender["email"]} if group.staff else {"contact_id": sid}
    oracle = [ToolCall(tool=who, args={"full_name": name}),
              ToolCall(tool="search_emails", args={by: sid, **({} if group.last else {"unread": True})})]
    if group.logger is not None:
        if "search_notes" not in b.tools or "search_users" not in b.tools:
            return None
        oracle += [ToolCall(tool="search_users", args={"full_name": group.logger["full_name"]}),
                   ToolCall(tool="search_notes", args={"author_id": group.logger["id"]})]
    declined: list[ToolCall] = []
    for req in group.requests:
        eid = _email_id(b, req.subject) if req.channel == "email" else None
        table, tr, row = req.table, req.transition, req.row
        search = f"search_{table.name}"
        if (eid is None and req.channel == "email") or tr.name not in b.tools or search not in b.tools \
                or table.label is None:
            return None
        if eid is not None:
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
            if group.last:  # a note whatever was decided
                oracle.append(ToolCall(tool="create_note", args={"subject_id": row["id"], "body": NOTE_DECLINED}))
                declined.append(act)
            else:
                declined += [act, *([note] if noted else [])]
            reply = REPLY_DECLINED
        else:  # a follow-up: already done; a second note would be collateral
            reply = REPLY_REPEAT
            if noted:
                declined.append(note)
        if req.channel == "note":
            oracle.append(ToolCall(tool="create_email", args={"subject": f"Re: {req.subject}", "body": reply,
                                                              **to}))
            continue
        oracle.append(ToolCall(tool="create_email", args={"subject": f"Re: {req.subject}", "body": reply,
                                                          **to, "in_reply_to": eid}))
        oracle.append(ToolCall(tool="update_email", args={"email_id": eid, "unread": False}))
    name = f"our colleague {name}" if group.staff else name
    if group.last:
        phrase = LAST_PHRASES[len(b.tasks) % len(LAST_PHRASES)]
        text = phrase.format(name=name) + " " + LAST_RULES.format(anchor=anchor.singular)
        return Plan(text, oracle, anchor.name, declined_calls=declined)
    phrase = PHRASES[len(b.tasks) % len(PHRASES)]
    text = (phrase.format(name=name) + " "
            + RULES.format(note=NOTE_CLAUSE.format(anchor=anchor.singular) if notes else ""))
    if group.logger is not None:
        text += PHONED.format(logger=group.logger["full_name"], anchor=anchor.singular)
    return Plan(text, oracle, anchor.name, declined_calls=declined)


def describe(group: Group) -> list[dict[str, Any]]:
    """The group's requests as data (tests and the world page read them)."""
    return [{"kind": r.kind, "subject": r.subject, "record": r.row.get(r.table.label or "id"), "rule": r.rule,
             "channel": r.channel} for r in group.requests]

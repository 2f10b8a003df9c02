"""workflow: around one anchor record, create a linked record, note it on the anchor, and email the
party the anchor concerns (or its owner): create, link, notify."""

from __future__ import annotations

from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import ToolCall

from .builder import TaskBuilder
from .driver import Plan, Stream
from .words import a_or_an, cap, tool_name

FAMILY = "workflow"
QUOTA = 22
TRIES = 4
# The note is on the anchor, not on the record just created: every phrase names which record it goes on.
PHRASES = [
    "For {anchor}: {create}, add a note on the {anchor_kind} saying \"{note}\", and {notify}.",
    "Handle {anchor}. First {create}. Then leave a note on the {anchor_kind} (\"{note}\") and {notify}.",
    "Please {create} for {anchor}, note \"{note}\" on the {anchor_kind} itself, and {notify}.",
]
# Neutral wording, for a pack that gives its notes none of its own (`texts: notes.body`).
NOTE_TEXTS = ["Reviewed with the team today", "Checked against policy", "Follow-up scheduled with the owner"]
NEEDED_TOOLS = {"create_note", "create_email"}


def note_texts(b: TaskBuilder) -> list[str]:
    """What a note says: the domain's own note wording, the texts its seeded notes are drawn from, so a note on
    a paycheck reads like payroll and not like customer service; else neutral wording."""
    gen = b.spec.table("notes").column("body").gen
    choice = gen.get("choice") if isinstance(gen, dict) else None
    return [str(x) for x in choice] if choice else NOTE_TEXTS


def candidates(b: TaskBuilder) -> Stream:
    """Every anchor row (shuffled), when some table links to the anchor and can be created."""
    anchor, anchors = b.anchor_rows()
    linked = [t for t in b.spec.tables if t.create and tool_name(t, "create") in b.tools and t.name != "notes"
              and any(t.column(c).ref == anchor.name for c in t.create)]
    if not (linked and anchors and NEEDED_TOOLS <= b.tools):
        return Stream([])
    return Stream([(anchor, row, linked) for row in anchors])


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    anchor, row, linked = candidate
    addr = b.address(anchor, row)
    if addr is None:
        return None
    table = b.rng.choice(linked)
    link_col = next(c for c in table.create or [] if table.column(c).ref == anchor.name)
    made_args = b.create_args(table, {link_col: row["id"]}, f"{table.singular} for {row.get(anchor.label, '')}")
    if made_args is None:
        return None
    args, said, lookups = made_args
    note = b.rng.choice(note_texts(b))
    told = b.notify(anchor, row, f"new {table.singular}", addr.text)
    if told is None:
        return None
    create = f"open {a_or_an(table.singular)} {table.singular}" + (f" with {', '.join(said)}" if said else "")
    oracle = [
        *addr.lookup,
        *b.getter(anchor, row),
        *lookups,
        ToolCall(tool=tool_name(table, "create"), args=args),
        ToolCall(tool="create_note", args={"subject_id": row["id"], "body": note}),
        *told[1],
    ]
    text = fill(b.rng.choice(PHRASES), anchor=addr.text, anchor_kind=anchor.singular, create=create, note=note,
                notify=told[0])
    return Plan(cap(text), oracle, table.name)

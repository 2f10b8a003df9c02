"""workflow: around one anchor record, create a linked record, note it on the anchor, and email a
contact: create, link, notify."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from worldfactory.spec import TableDef, ToolCall

from ..workflow import FREE_TEXT_CHOICES
from .builder import TaskBuilder
from .driver import Plan, Stream
from .words import cap, human, tool_name

FAMILY = "workflow"
QUOTA = 22
TRIES = 4
PHRASES = [
    "For {anchor}: {create}, add a note saying \"{note}\", and email {contact} with the subject \"{subject}\".",
    "Handle {anchor}. First {create}. Then leave a note on it (\"{note}\") and send {contact} an email titled "
    "\"{subject}\".",
    "Please {create} for {anchor}, note \"{note}\" on it, and let {contact} know by email (subject \"{subject}\").",
]
NOTE_TEXTS = ["Reviewed with the team today", "Customer informed of the next steps", "Checked against policy",
              "Follow-up scheduled with the owner", "Documents requested from the client"]
NEEDED_TOOLS = {"create_note", "create_email"}


def candidates(b: TaskBuilder) -> Stream:
    """Every anchor row (shuffled), when some table links to the anchor and can be created."""
    anchor, anchors = b.anchor_rows()
    contacts = b.contacts()
    linked = [t for t in b.spec.tables if t.create and tool_name(t, "create") in b.tools and t.name != "notes"
              and any(t.column(c).ref == anchor.name for c in t.create)]
    if not (linked and contacts and anchors and NEEDED_TOOLS <= b.tools):
        return Stream([])
    return Stream([(anchor, row, linked, contacts) for row in anchors])


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    anchor, row, linked, contacts = candidate
    addr = b.address(anchor, row)
    if addr is None:
        return None
    table = b.rng.choice(linked)
    link_col = next(c for c in table.create or [] if table.column(c).ref == anchor.name)
    made_args = _create_args(b, table, {link_col: row["id"]}, f"{table.singular} for {row.get(anchor.label, '')}")
    if made_args is None:
        return None
    args, said, lookups = made_args
    contact, caddr = b.rng.choice(contacts)
    note = b.rng.choice(NOTE_TEXTS)
    label = row.get(anchor.label) or addr.text
    subject = f"{cap(anchor.singular)} {label}: new {table.singular}"
    create = f"open a {table.singular}" + (f" with {', '.join(said)}" if said else "")
    oracle = [
        *addr.lookup,
        *lookups,
        ToolCall(tool=tool_name(table, "create"), args=args),
        ToolCall(tool="create_note", args={"subject_id": row["id"], "body": note}),
        *caddr.lookup,
        ToolCall(tool="create_email", args={"subject": subject, "body": f"{note}. A new {table.singular} is open.",
                                            "contact_id": contact["id"]}),
    ]
    text = b.rng.choice(PHRASES).format(anchor=addr.text, create=create, note=note,
                                        contact=caddr.text.removeprefix("contact "), subject=subject)
    return Plan(cap(text), oracle, table.name)


def _create_args(b: TaskBuilder, table: TableDef, fixed: dict[str, Any], tag: str
                 ) -> tuple[dict[str, Any], list[str], list[ToolCall]] | None:
    """Arguments for create_<table> with everything not fixed chosen and said in words."""
    args: dict[str, Any] = {}
    said: list[str] = []
    lookups: list[ToolCall] = []
    for name in table.create or []:
        col = table.column(name)
        if name in fixed:
            args[name] = fixed[name]
            continue
        if col.ref:
            target = b.spec.table(col.ref)
            if not (target.label and target.label in target.search and target.column(target.label).unique):
                return None
            rows = b.rows(target)
            if not rows:
                return None
            row = b.rng.choice(rows)
            args[name] = row["id"]
            lookups.append(ToolCall(tool=f"search_{target.name}", args={target.label: row[target.label]}))
            said.append(f"{col.human} {target.singular} {row[target.label]}")
        elif col.enum:
            args[name] = b.rng.choice(col.enum)
            said.append(f"{col.human} {human(args[name])}")
        elif col.type in ("money", "number", "integer"):
            lo = col.minimum if col.minimum is not None else 1.0
            hi = col.maximum if col.maximum is not None else max(lo + 1.0, 2000.0)
            value = b.rng.uniform(lo + (hi - lo) * 0.1, lo + (hi - lo) * 0.4)
            args[name] = int(value) if col.type == "integer" else round(value, 2)
            said.append(f"{col.human} ${args[name]:,.2f}" if col.type == "money" else f"{col.human} {args[name]}")
        elif col.type == "date":
            day = date.fromisoformat(b.spec.brief.clock) + timedelta(days=b.rng.randint(3, 30))
            args[name] = day.isoformat()
            said.append(f"{col.human} {args[name]}")
        elif col.type == "text":
            args[name] = b.rng.choice(FREE_TEXT_CHOICES) if col.free_text else f"{cap(tag)} {b.rng.randint(100, 999)}"
            said.append(f"{col.human} \"{args[name]}\"")
        else:
            return None
    return args, said, lookups

"""year_end: one close-out task of LONG_TARGET calls or more, filed as a bulk task: for every anchor
record a review document (filed and finalized), a note, and an email of the review to one auditor
contact; then sweeps over other tables until the plan is long enough."""

from __future__ import annotations

from typing import Any

from worldfactory.spec import ToolCall

from ..workflow import id_param, render_verb
from .builder import SEARCH_MAX, TaskBuilder, sweep_calls
from .driver import Plan, Stream
from .words import a_or_an, cap, human, in_state

FAMILY = "bulk"
QUOTA = 1
TRIES = None
LONG_TARGET = 1000
NEEDED_TOOLS = {"create_note", "create_document", "create_email"}


def candidates(b: TaskBuilder) -> Stream:
    """The one close-out, when the world has a labelled anchor, documents that can be finalized,
    contacts and the tools to create notes, documents and emails; else none."""
    anchor, anchors = b.anchor_rows()
    docs = next((t for t in b.spec.tables if t.name == "documents"), None)
    finalize = next((tr for tr in (docs.workflow.transitions if docs and docs.workflow else [])
                     if "draft" in tr.from_ and not tr.params and not tr.guards and tr.name in b.tools), None)
    contacts = b.contacts()
    if not (anchor.label and docs and finalize and contacts and NEEDED_TOOLS <= b.tools):
        return Stream([], shuffle=False)
    return Stream([(anchor, anchors, docs, finalize, contacts)], shuffle=False)


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    anchor, anchors, docs, finalize, contacts = candidate
    auditor, auditor_addr = b.rng.choice(contacts)
    doc_type = (docs.column("doc_type").enum or ["memo"])[0]
    next_doc = b.next_id(docs)
    label_h = anchor.column(anchor.label).human
    calls = [*auditor_addr.lookup, ToolCall(tool=f"search_{anchor.name}", args={"limit": SEARCH_MAX})]
    for row in anchors[:SEARCH_MAX]:
        title = f"Year-end review {row[anchor.label]}"
        calls += [
            ToolCall(tool="create_document", args={"title": title, "doc_type": doc_type, "subject_id": row["id"]}),
            ToolCall(tool=finalize.name, args={id_param(docs): next_doc}),
            ToolCall(tool="create_note", args={"subject_id": row["id"], "body": "Year-end review done"}),
            ToolCall(tool="create_email", args={"subject": title, "body": f"{title} is filed.",
                                                "contact_id": auditor["id"]}),
        ]
        next_doc += 1
    auditor_name = auditor_addr.text.removeprefix("contact ")
    kind = human(doc_type)
    parts = [f"for every {anchor.singular}, file {a_or_an(kind)} {kind} document titled \"Year-end review <its "
             f"{label_h}>\" and {render_verb(finalize, 'it', {})}, leave a note on the {anchor.singular} saying "
             f"\"Year-end review done\", and email {auditor_name} with the document's title as the subject"]
    sweeps = sorted(b.sweeps(), key=lambda s: (-len(s.rows), s.table.name, s.transition.name, s.state))
    sources: dict[str, set[str]] = {}  # per table: states swept from
    targets: dict[str, set[str]] = {}  # per table: states swept into (or that this task's new rows start in)
    for name in ("emails", "notes"):
        made = next((t for t in b.spec.tables if t.name == name), None)
        if made and made.workflow and made.workflow.column in made.create_defaults:
            targets.setdefault(name, set()).add(str(made.create_defaults[made.workflow.column]))
    for s in sweeps:
        if len(calls) >= LONG_TARGET:
            break
        table, tr, state, args, _ = s
        src, dst = sources.setdefault(table.name, set()), targets.setdefault(table.name, set())
        # A close-out tidies up (nothing destructive), and no sweep touches rows another sweep moved, so
        # "every <state> record" means the same rows whatever order the agent works in.
        if table.name in ("documents", anchor.name) or tr.destructive or state in src | dst or tr.to in src:
            continue
        src.add(state)
        dst.add(tr.to)
        calls += sweep_calls(s)
        parts.append(render_verb(tr, f"every {in_state(table.singular, state)}", args))
    if len(calls) < LONG_TARGET:
        return None
    text = "Year-end close. " + "; ".join(cap(p) if i == 0 else p for i, p in enumerate(parts)) + "."
    return Plan(text, calls, anchor.name)

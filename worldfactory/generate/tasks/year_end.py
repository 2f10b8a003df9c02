"""year_end: one close-out task of LONG_TARGET calls or more, filed as a bulk task: for every anchor
record (or every one in a status) a review document (filed and finalized), a note, and an email of the
review to one auditor contact; then sweeps over other tables until the plan is long enough. A world
whose records and sweeps fall short of it with those four calls a record also archives each review.

A large world has more anchor records than a close-out needs: it is scoped to the records in one
status, or asks fewer actions of each record, so the plan stays near LONG_TARGET calls (the horizon
tasks are made for) instead of growing with the world. The oracle pages through a search that
returns more than one page, so "every" means every record."""

from __future__ import annotations

from typing import Any, NamedTuple

from worldfactory.spec import TableDef, ToolCall

from ..workflow import id_param, render_verb
from .builder import SEARCH_MAX, Sweep, TaskBuilder, sweep_calls
from .driver import Plan, Stream
from .words import a_or_an, cap, human, in_state

FAMILY = "bulk"
QUOTA = 1
TRIES = None
LONG_TARGET = 1000
CAP = 1250  # a plan whose records part is longer gets a narrower scope or fewer actions, if one reaches the target
ACTIONS = (4, 3, 2)  # calls per record: a document filed and finalized, a note, an email (dropped last first)
ARCHIVED = 5  # calls per record when no option of ACTIONS reaches the target: the review is archived too
NEEDED_TOOLS = {"create_note", "create_document", "create_email"}


def candidates(b: TaskBuilder) -> Stream:
    """The one close-out, when the world has a labelled anchor, documents that can be finalized,
    contacts and the tools to create notes, documents and emails; else none."""
    anchor, anchors = b.anchor_rows()
    docs = next((t for t in b.spec.tables if t.name == "documents"), None)
    plain = [tr for tr in (docs.workflow.transitions if docs and docs.workflow else [])
             if not tr.params and not tr.guards and tr.bulk and tr.name in b.tools]  # bulk: false stays out
    finalize = next((tr for tr in plain if "draft" in tr.from_), None)
    archive = next((tr for tr in plain if finalize and finalize.to in tr.from_ and tr.to not in finalize.from_
                    and not tr.destructive), None)  # onward from final, never back to draft
    contacts = b.contacts()
    if not (anchor.label and docs and finalize and contacts and NEEDED_TOOLS <= b.tools):
        return Stream([], shuffle=False)
    return Stream([(anchor, anchors, docs, finalize, archive, contacts)], shuffle=False)


class Scope(NamedTuple):
    """The anchor records a close-out covers: all of them (state None), or those in one status."""

    state: str | None
    rows: list[dict[str, Any]]


def scopes(anchor: TableDef, anchors: list[dict[str, Any]]) -> list[Scope]:
    """Every record, then the records of each status (by name) that fit one search page."""
    out = [Scope(None, anchors)]
    if anchor.workflow is not None:
        column = anchor.workflow.column
        for state in sorted({str(r[column]) for r in anchors if r[column] is not None}):
            rows = [r for r in anchors if str(r[column]) == state]
            if len(rows) <= SEARCH_MAX:
                out.append(Scope(state, rows))
    return out


def options(anchor: TableDef, anchors: list[dict[str, Any]], actions: tuple[int, ...] = ACTIONS
            ) -> list[tuple[Scope, int]]:
    """(scope, actions per record) in the order plans try them: the longest records part within CAP
    first (every record with every action, when that fits), then the shortest beyond it."""
    found = [(len(search_calls(anchor, scope)) + k * len(scope.rows), i, -k, scope)
             for i, scope in enumerate(scopes(anchor, anchors)) if scope.rows for k in actions]
    within = sorted((o for o in found if o[0] <= CAP), key=lambda o: (-o[0], *o[1:3]))
    beyond = sorted((o for o in found if o[0] > CAP), key=lambda o: o[:3])
    return [(scope, -negative_k) for _, _, negative_k, scope in within + beyond]


def search_calls(anchor: TableDef, scope: Scope) -> list[ToolCall]:
    """The searches that list the scope's records: one page, or as many as it takes."""
    args: dict[str, Any] = {} if scope.state is None else {anchor.workflow.column: scope.state}  # type: ignore[union-attr]
    pages = range(0, max(1, len(scope.rows)), SEARCH_MAX)
    return [ToolCall(tool=f"search_{anchor.name}", args={**args, "limit": SEARCH_MAX, **({"offset": o} if o else {})})
            for o in pages]


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    anchor, anchors, docs, finalize, archive, contacts = candidate
    auditor, auditor_addr = b.rng.choice(contacts)
    sweeps = sorted(b.sweeps(), key=lambda s: (-len(s.rows), s.table.name, s.transition.name, s.state))  # read once
    tried = options(anchor, anchors) + (options(anchor, anchors, (ARCHIVED,)) if archive else [])
    for scope, actions in tried:
        made = _plan(b, anchor, docs, finalize, archive, auditor, auditor_addr, scope, actions, sweeps)
        if made is not None:
            return made
    return None


def _plan(b: TaskBuilder, anchor: TableDef, docs: TableDef, finalize: Any, archive: Any, auditor: dict[str, Any],
          auditor_addr: Any, scope: Scope, actions: int, sweeps: list[Sweep]) -> Plan | None:
    doc_type = (docs.column("doc_type").enum or ["memo"])[0]
    next_doc = b.next_id(docs)
    label_h = anchor.column(anchor.label).human
    calls = [*(auditor_addr.lookup if actions >= 4 else []), *search_calls(anchor, scope)]  # the auditor: emails only
    for row in scope.rows:
        title = f"Year-end review {row[anchor.label]}"
        calls += [
            ToolCall(tool="create_document", args={"title": title, "doc_type": doc_type, "subject_id": row["id"]}),
            ToolCall(tool=finalize.name, args={id_param(docs): next_doc}),
            *([ToolCall(tool=archive.name, args={id_param(docs): next_doc})] if actions >= ARCHIVED else []),
        ]
        if actions >= 3:
            calls.append(ToolCall(tool="create_note", args={"subject_id": row["id"], "body": "Year-end review done"}))
        if actions >= 4:
            calls.append(ToolCall(tool="create_email", args={"subject": title, "body": f"{title} is filed.",
                                                             "contact_id": auditor["id"]}))
        next_doc += 1
    auditor_name = auditor_addr.text  # "contact Zara Devlin": says where to look her up
    kind = human(doc_type)
    every = anchor.singular if scope.state is None else in_state(anchor.singular, scope.state)
    done = render_verb(finalize, "it", {})
    if actions >= ARCHIVED:
        done = f"{done}, then {render_verb(archive, 'it', {})}"
    steps = [f"file {a_or_an(kind)} {kind} document titled \"Year-end review <its {label_h}>\" and {done}"]
    if actions >= 3:
        steps.append(f"leave a note on the {anchor.singular} saying \"Year-end review done\"")
    if actions >= 4:
        steps.append(f"email {auditor_name} with the document's title as the subject")
    said = steps[0] if len(steps) == 1 else ", ".join(steps[:-1]) + ", and " + steps[-1]
    parts = [f"for every {every}, {said}"]
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

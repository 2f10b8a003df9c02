"""Task families that span several records or many steps, built on TaskBuilder's addressing.

- workflow: create and link records around one anchor record, then notify a contact by email;
- decline: a request that a business rule forbids: the right end state is unchanged and the
  answer names the rule;
- sweep: act on every record in a state (50 to 500 calls);
- year_end: a close-out over every anchor record and several sweeps (1,000 calls or more).
Every choice comes from the builder's seeded random stream; nothing here is per domain.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from worldfactory.build.data import fetch_dicts as _rows
from worldfactory.build.workflow import FREE_TEXT_CHOICES, guards_hold, id_param, render_verb, slug
from worldfactory.spec import TableDef, ToolCall

if TYPE_CHECKING:
    from worldfactory.build.tasks import Address, TaskBuilder

SEARCH_MAX = 500
SWEEP_MIN = 48
LONG_TARGET = 1000
WORKFLOW_PHRASES = [
    "For {anchor}: {create}, add a note saying \"{note}\", and email {contact} with the subject \"{subject}\".",
    "Handle {anchor}. First {create}. Then leave a note on it (\"{note}\") and send {contact} an email titled "
    "\"{subject}\".",
    "Please {create} for {anchor}, note \"{note}\" on it, and let {contact} know by email (subject \"{subject}\").",
]
DECLINE_PHRASES = [
    "{Verb}. If a company rule does not allow it, do not do it and tell me which rule stops it.",
    "Please {verb}, unless our rules forbid it; in that case leave it as it is and name the rule.",
    "{Verb} if policy allows. If it does not, change nothing and say which policy value is in the way.",
]
SWEEP_PHRASES = ["{Verb}.", "Please {verb}, all of them.", "Bulk job: {verb}."]
NOTE_TEXTS = ["Reviewed with the team today", "Customer informed of the next steps", "Checked against policy",
              "Follow-up scheduled with the owner", "Documents requested from the client"]


def _human(value: Any) -> str:
    return str(value).replace("_", " ")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _tool(table: TableDef, kind: str) -> str:
    return f"{kind}_{slug(table.singular)}"


def create_args(b: TaskBuilder, table: TableDef, fixed: dict[str, Any], tag: str
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
            rows = _rows(b.conn, f"SELECT * FROM {target.name} ORDER BY id")
            if not rows:
                return None
            row = b.rng.choice(rows)
            args[name] = row["id"]
            lookups.append(ToolCall(tool=f"search_{target.name}", args={target.label: row[target.label]}))
            said.append(f"{col.human} {target.singular} {row[target.label]}")
        elif col.enum:
            args[name] = b.rng.choice(col.enum)
            said.append(f"{col.human} {_human(args[name])}")
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
            args[name] = b.rng.choice(FREE_TEXT_CHOICES) if col.free_text else f"{_cap(tag)} {b.rng.randint(100, 999)}"
            said.append(f"{col.human} \"{args[name]}\"")
        else:
            return None
    return args, said, lookups


def _anchor_rows(b: TaskBuilder) -> tuple[TableDef, list[dict[str, Any]]]:
    table = b.spec.table(b.spec.anchor)
    return table, _rows(b.conn, f"SELECT * FROM {table.name} ORDER BY id")


def _contacts(b: TaskBuilder) -> list[tuple[dict[str, Any], Address]]:
    if "contacts" not in {t.name for t in b.spec.tables}:
        return []
    table = b.spec.table("contacts")
    out = []
    for row in _rows(b.conn, "SELECT * FROM contacts ORDER BY id"):
        addr = b.address(table, row)
        if addr is not None:
            out.append((row, addr))
    return out


def workflow(b: TaskBuilder, quota: int) -> None:
    """Create a linked record, note it on the anchor, and email a contact: create, link, notify."""
    anchor, anchors = _anchor_rows(b)
    contacts = _contacts(b)
    linked = [t for t in b.spec.tables if t.create and _tool(t, "create") in b.tools and t.name != "notes"
              and any(t.column(c).ref == anchor.name for c in t.create)]
    needed = {"create_note", "create_email"}
    if not (linked and contacts and anchors and needed <= b.tools):
        return
    made = 0
    b.rng.shuffle(anchors)
    for row in anchors[: quota * 4]:
        if made >= quota:
            break
        addr = b.address(anchor, row)
        if addr is None:
            continue
        table = b.rng.choice(linked)
        link_col = next(c for c in table.create or [] if table.column(c).ref == anchor.name)
        made_args = create_args(b, table, {link_col: row["id"]}, f"{table.singular} for {row.get(anchor.label, '')}")
        if made_args is None:
            continue
        args, said, lookups = made_args
        contact, caddr = b.rng.choice(contacts)
        note = b.rng.choice(NOTE_TEXTS)
        label = row.get(anchor.label) or addr.text
        subject = f"{_cap(anchor.singular)} {label}: new {table.singular}"
        create = f"open a {table.singular}" + (f" with {', '.join(said)}" if said else "")
        oracle = [
            *addr.lookup,
            *lookups,
            ToolCall(tool=_tool(table, "create"), args=args),
            ToolCall(tool="create_note", args={"subject_id": row["id"], "body": note}),
            *caddr.lookup,
            ToolCall(tool="create_email", args={"subject": subject, "body": f"{note}. A new {table.singular} is open.",
                                                "contact_id": contact["id"]}),
        ]
        text = b.rng.choice(WORKFLOW_PHRASES).format(anchor=addr.text, create=create, note=note,
                                                     contact=caddr.text.removeprefix("contact "), subject=subject)
        made += b.add("workflow", _cap(text), oracle, table.name)


def decline(b: TaskBuilder, quota: int) -> None:
    """Requests a business rule forbids: the oracle reads the record and the rule, changes nothing, names it."""
    pools: list[list[Any]] = []
    for table, tr in b._transitions():
        rule_guards = [g for g in tr.guards if g.rule]
        if not rule_guards or _tool(table, "get") not in b.tools:
            continue
        pool = []
        for row in b._rows_in(table, tr.from_):
            args = b._args(tr, row)
            failing = [g for g in rule_guards if not guards_hold(tr.model_copy(update={"guards": [g]}), row, args,
                                                                 b.rules)]
            others = [g for g in tr.guards if not g.rule]
            if failing and guards_hold(tr.model_copy(update={"guards": others}), row, args, b.rules):
                pool.append((table, tr, row, args, failing[0]))
        pools.append(pool)
    made = 0
    for table, tr, row, args, guard in b._take(pools, quota * 3):
        if made >= quota:
            break
        addr = b.address(table, row)
        if addr is None:
            continue
        rule = next(r for r in b.spec.rules if r.name == guard.rule)
        verb = render_verb(tr, addr.text, args)
        oracle = [*addr.lookup, *b.getter(table, row),
                  ToolCall(tool="search_business_rules", args={"name": rule.name})]
        text = b.rng.choice(DECLINE_PHRASES).format(Verb=_cap(verb), verb=verb)
        made += b.add("decline", text, oracle, table.name, answer=rule.label, answer_type="reason")


def _sweeps(b: TaskBuilder) -> list[tuple[TableDef, Any, str, dict[str, Any], list[dict[str, Any]]]]:
    """Every (table, transition, state) whose rows can all take the transition with one set of arguments."""
    out = []
    for table, tr in b._transitions():
        if any(p.task_value and p.task_value.startswith("row.") for p in tr.params):
            continue
        assert table.workflow is not None
        if table.workflow.column not in table.search:
            continue
        for state in tr.from_:
            rows = b._rows_in(table, [state])
            if not rows or len(rows) > SEARCH_MAX:
                continue
            args = b._args(tr, rows[0])
            if all(guards_hold(tr, r, args, b.rules) for r in rows):
                out.append((table, tr, state, args, rows))
    return out


def _sweep_calls(table: TableDef, tr: Any, state: str, args: dict[str, Any], rows: list[dict[str, Any]]
                 ) -> list[ToolCall]:
    assert table.workflow is not None
    search = ToolCall(tool=f"search_{table.name}", args={table.workflow.column: state, "limit": SEARCH_MAX})
    return [search] + [ToolCall(tool=tr.name, args={id_param(table): r["id"], **args}) for r in rows]


def sweep(b: TaskBuilder, quota: int) -> None:
    """Act on every record in one state: long horizons (48 to 500 records)."""
    candidates = [s for s in _sweeps(b) if len(s[4]) >= SWEEP_MIN]
    b.rng.shuffle(candidates)
    made = 0
    for table, tr, state, args, rows in candidates:
        if made >= quota:
            break
        verb = render_verb(tr, f"every {_human(state)} {table.singular}", args)
        text = b.rng.choice(SWEEP_PHRASES).format(Verb=_cap(verb), verb=verb)
        made += b.add("bulk", text, _sweep_calls(table, tr, state, args, rows), table.name)


def year_end(b: TaskBuilder) -> None:
    """One close-out task of 1,000 calls or more: for every anchor record a review document (filed and
    finalized), a note, and an email of the review to one auditor contact; then sweeps over other
    tables until the plan is long enough."""
    anchor, anchors = _anchor_rows(b)
    docs = next((t for t in b.spec.tables if t.name == "documents"), None)
    finalize = next((tr for tr in (docs.workflow.transitions if docs and docs.workflow else [])
                     if "draft" in tr.from_ and not tr.params and not tr.guards and tr.name in b.tools), None)
    contacts = _contacts(b)
    if not (anchor.label and docs and finalize and contacts
            and {"create_note", "create_document", "create_email"} <= b.tools):
        return
    auditor, auditor_addr = b.rng.choice(contacts)
    doc_type_col = docs.column("doc_type")
    doc_type = (doc_type_col.enum or ["memo"])[0]
    next_doc = b.conn.execute("SELECT coalesce(max(id), 0) FROM documents").fetchone()[0] + 1
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
    parts = [f"for every {anchor.singular}, file a {_human(doc_type)} document titled \"Year-end review <its "
             f"{label_h}>\" and {render_verb(finalize, 'it', {})}, leave a note on the {anchor.singular} saying "
             f"\"Year-end review done\", and email {auditor_name} with the document's title as the subject"]
    sweeps = sorted(_sweeps(b), key=lambda s: (-len(s[4]), s[0].name, s[1].name, s[2]))
    sources: dict[str, set[str]] = {}  # per table: states swept from
    targets: dict[str, set[str]] = {}  # per table: states swept into (or that this task's new rows start in)
    for name in ("emails", "notes"):
        made = next((t for t in b.spec.tables if t.name == name), None)
        if made and made.workflow and made.workflow.column in made.create_defaults:
            targets.setdefault(name, set()).add(str(made.create_defaults[made.workflow.column]))
    for table, tr, state, args, rows in sweeps:
        if len(calls) >= LONG_TARGET:
            break
        src, dst = sources.setdefault(table.name, set()), targets.setdefault(table.name, set())
        # A close-out tidies up (nothing destructive), and no sweep touches rows another sweep moved, so
        # "every <state> record" means the same rows whatever order the agent works in.
        if table.name in ("documents", anchor.name) or tr.destructive or state in src | dst or tr.to in src:
            continue
        src.add(state)
        dst.add(tr.to)
        calls += _sweep_calls(table, tr, state, args, rows)
        parts.append(render_verb(tr, f"every {_human(state)} {table.singular}", args))
    if len(calls) < LONG_TARGET:
        return
    text = "Year-end close. " + "; ".join(_cap(p) if i == 0 else p for i, p in enumerate(parts)) + "."
    b.add("bulk", text, calls, anchor.name)

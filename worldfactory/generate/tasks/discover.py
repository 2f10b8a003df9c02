"""discover: a record named the way people name it, beside a near-duplicate the world seeds on purpose.

Each task is about one side of a seeded pair (generate/twins.py) and names it by what tells the two
apart: the date it was filed ("the fire claim on policy POL-000047 filed on January 9", "the later of the
two"), the city of one of two records named alike ("the policyholder in Riverton whose name begins with
Jonas Hartley"), or who a person is (our colleague in Finance, not the customer contact of the same
name), or by a note written on it. The search the agent makes finds both; it must compare and pick.
``Task.trap`` is the same plan on the other twin, and the verifier must fail it.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from worldfactory.fill import fill
from worldfactory.spec import TableDef, ToolCall

from ..twins import Twin, dated_tables, find_twins
from ..workflow import guards_hold, id_param, render_verb
from .builder import TaskBuilder
from .driver import Plan, Pools
from .words import cap, human, tool_name

FAMILY = "discover"
QUOTA = 10
TRIES = 3
TWIN_SHARE = 0.8  # of tasks about the newer twin (the second search hit), so the first hit is mostly wrong
NOTED_TWIN_SHARE = 0.4  # of pairs whose older record has a note: the newer one is meant less often
NOTE_SHARE = 0.6  # of dated tasks whose record has a note of its own, named by that note
PHRASES = ["{Verb}.", "Please {verb}.", "Could you {verb}?", "We need to {verb}."]


def candidates(b: TaskBuilder) -> Pools:
    """One pool per kind of twin: each pair once."""
    pairs = find_twins(b.spec, b.conn)
    return Pools([[p for p in pairs if p.kind == kind] for kind in ("dated", "named", "same_name")])


def plan(b: TaskBuilder, pair: Twin) -> Plan | None:
    noted = pair.kind == "dated" and pair.table == b.spec.anchor and b.has_table("notes") and bool(
        b.conn.execute("SELECT 1 FROM notes WHERE subject_id = ?", (pair.source,)).fetchone())
    newer = b.rng.random() < (NOTED_TWIN_SHARE if noted else TWIN_SHARE)  # a note can name only the older one
    if pair.kind == "same_name":
        return _same_name(b, pair, newer)
    table = b.spec.table(pair.table)
    mine, other = (pair.twin, pair.source) if newer else (pair.source, pair.twin)
    row, twin = b.row(table, mine), b.row(table, other)
    if row is None or twin is None:
        return None
    found = _dated(b, table, row, twin) if pair.kind == "dated" else _named(b, table, row, twin)
    if found is None:
        return None
    said, lookup = found
    act = _action(b, table, row, said)
    if act is None:
        return None
    verb, extra, call = act
    oracle = lookup + b.getter(table, row) + extra + [call]
    trap = lookup + b.getter(table, twin) + extra + [_on(call, table, twin["id"])]
    phrase = b.rng.choice(PHRASES)
    return Plan(fill(phrase, Verb=cap(verb), verb=verb), oracle, table.name, trap=trap, distractors=1)


def _on(call: ToolCall, table: TableDef, row_id: int) -> ToolCall:
    return ToolCall(tool=call.tool, args={**call.args, id_param(table): row_id})


def _action(b: TaskBuilder, table: TableDef, row: dict[str, Any], said: str
            ) -> tuple[str, list[ToolCall], ToolCall] | None:
    """What to do to the record: a transition its guards allow (tried first), else a change to a field."""
    wf = table.workflow
    moves = [tr for t, tr in b.transitions() if t.name == table.name and wf and row[wf.column] in tr.from_]
    b.rng.shuffle(moves)
    for tr in moves:
        args = b.task_args(tr, row)
        if not guards_hold(tr, row, args, b.rules, b.today):
            continue
        words = b.said_args(tr, args)
        if words is None:
            continue
        call = ToolCall(tool=tr.name, args={id_param(table): row["id"], **args})
        return render_verb(tr, said, words[0]), words[1], call
    if table.update and tool_name(table, "update") in b.tools:
        change = b.update_change(table, row)
        if change is not None:
            template, words, extra, call_args = change
            call = ToolCall(tool=tool_name(table, "update"), args={id_param(table): row["id"], **call_args})
            return fill(template, obj=said, **words), extra, call
    return None


def _spoken(day: str) -> str:
    d = date.fromisoformat(day)
    return f"{d:%B} {d.day}, {d.year}"


def _dated(b: TaskBuilder, table: TableDef, row: dict[str, Any], twin: dict[str, Any]
           ) -> tuple[str, list[ToolCall]] | None:
    """"the fire claim on policy POL-000047 filed on January 9, 2026" or "the later of the two ...": the search
    by parent (and a shared kind) finds both; the date picks one."""
    found = next(((p, d) for t, p, d in dated_tables(b.spec) if t.name == table.name), None)
    if found is None:
        return None
    parent_col, day_col = found
    col = table.column(parent_col)
    parent_table = b.spec.table(col.ref or "")
    parent = b.row(parent_table, row[parent_col])
    paddr = b.address(parent_table, parent, plain=True) if parent else None
    if paddr is None:
        return None
    kinds = [c for c in table.columns if c.enum and c.name in table.search
             and c.name != (table.workflow.column if table.workflow else "")]
    args: dict[str, Any] = {parent_col: row[parent_col]}
    noun = table.singular
    if kinds:
        args[kinds[0].name] = row[kinds[0].name]
        noun = f"{human(row[kinds[0].name])} {table.singular}"
    same = b.conn.execute(f"SELECT count(*) FROM {table.name} WHERE " + " AND ".join(f"{k} = ?" for k in args),
                          tuple(args.values())).fetchone()[0]
    link = f"on {paddr.text}" if col.human == parent_table.singular else f"whose {col.human} is {paddr.text}"
    day = table.column(day_col)
    verb = day.name[:-3].replace("_", " ") if day.name.endswith("_on") else f"with {day.human}"
    if row[day_col] == twin[day_col]:
        return None
    search = ToolCall(tool=f"search_{table.name}", args=args)
    noted = _noted(b, table, row, twin)
    ago = (date.fromisoformat(b.spec.brief.clock) - date.fromisoformat(row[day_col])).days
    on = " on" if day.name.endswith("_on") else ""
    if noted is not None and b.rng.random() < NOTE_SHARE:  # a detail from a note on it
        author, body, read = noted
        return f"the {noun} {link} with {author}'s note \"{body}\"", paddr.lookup + [search, read]
    if same == 2 and b.rng.random() < 0.5:
        order = "later" if row[day_col] > twin[day_col] else "earlier"
        text = f"the {order} of the two {noun}s {link}"
    elif 1 <= ago <= 6 and date.fromisoformat(twin[day_col]) != date.fromisoformat(row[day_col]):
        text = f"the {noun} {link}, the one {verb}{on} {date.fromisoformat(row[day_col]):%A} ({ago} days ago)"
    else:
        text = f"the {noun} {link}, the one {verb}{on} {_spoken(row[day_col])}"
    return text, paddr.lookup + [search]


def _noted(b: TaskBuilder, table: TableDef, row: dict[str, Any], twin: dict[str, Any]
           ) -> tuple[str, str, ToolCall] | None:
    """A note on the record (never on its twin) as a person recalls it: its author, its words, and the search
    that finds it; None where notes are not about this table or the record has none of its own."""
    if table.name != b.spec.anchor or not b.has_table("notes") or "search_notes" not in b.tools:
        return None
    notes = b.conn.execute("SELECT subject_id, author_id, body FROM notes WHERE subject_id IN (?, ?) ORDER BY id",
                           (row["id"], twin["id"])).fetchall()
    mine = [n for n in notes if n[0] == row["id"]]
    if not mine or len(mine) != len(notes) or len({n[2] for n in mine}) != len(mine):
        return None
    author = b.row(b.spec.table("users"), mine[0][1]) if b.has_table("users") else None
    if author is None:
        return None
    return author["full_name"], str(mine[0][2]), ToolCall(tool="search_notes", args={"subject_id": row["id"]})


def _named(b: TaskBuilder, table: TableDef, row: dict[str, Any], twin: dict[str, Any]
           ) -> tuple[str, list[ToolCall]] | None:
    """"the policyholder Jonas Hartley in Riverton" beside Jonas Hartley-Lindqvist in Ashford: a search by the
    shorter name finds both; the city picks one."""
    assert table.label is not None
    city = next((c.name for c in table.columns if c.gen == "city"), None)
    if city is None or row[city] == twin[city]:
        return None
    mine, theirs = str(row[table.label]), str(twin[table.label])
    base = mine if theirs.startswith(mine) else theirs
    if mine == base:
        text = f"{table.singular} {base} in {row[city]}"
    else:
        text = f"the {table.singular} in {row[city]} whose name begins with {base}"
    return text, [ToolCall(tool=f"search_{table.name}", args={table.label: base})]


def _same_name(b: TaskBuilder, pair: Twin, colleague: bool) -> Plan | None:
    """An email to our colleague (the user) or to the customer contact who shares their name."""
    if "create_email" not in b.tools or not b.has_table("users") or not b.has_table("contacts"):
        return None
    users, contacts = b.spec.table("users"), b.spec.table("contacts")
    user, contact = b.row(users, pair.source), b.row(contacts, pair.twin)
    if user is None or contact is None or not user.get("email"):
        return None
    name = user["full_name"]
    dept = b.row(b.spec.table("departments"), user.get("department_id")) if b.has_table("departments") else None
    account = (b.row(b.spec.table("accounts"), contact.get("account_id"))
               if b.has_table("accounts") and contact.get("account_id") else None)
    if dept is None or account is None:
        return None
    topic = b.rng.choice(["the quarterly review", "next week's visit", "the open questions", "the revised terms"])
    subject = f"{cap(topic.removeprefix('the '))}"
    body = f"A note about {topic}."
    to_user = ToolCall(tool="create_email", args={"subject": subject, "body": body, "to_address": user["email"]})
    to_contact = ToolCall(tool="create_email", args={"subject": subject, "body": body, "contact_id": contact["id"]})
    find_user = [ToolCall(tool="search_users", args={"full_name": name})] + b.getter(users, user)
    find_contact = [ToolCall(tool="search_contacts", args={"full_name": name})] + b.getter(contacts, contact)
    if colleague:
        who = f"our colleague {name} in {dept['name']}"
        oracle, trap = find_user + [to_user], find_contact + [to_contact]
    else:
        who = f"{name}, the {human(contact['job_title'])} at our customer {account['name']}" \
            if contact.get("job_title") else f"{name} at our customer {account['name']}"
        oracle, trap = find_contact + [to_contact], find_user + [to_user]
    text = f"Email {who} with the subject \"{subject}\" about {topic}."
    return Plan(text, oracle, "emails", trap=trap, distractors=1)

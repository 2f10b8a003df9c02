"""The context every task family builds on, and the candidates it enumerates.

A TaskBuilder holds the world being given tasks: its spec, its tool names, a read-only connection
to its seed database, and the one seeded random stream every choice is drawn from (the order of
draws is part of the world's bytes). It says how a person refers to a record (`address`), reads
a record first (`getter`), emails a contact (`notify`), and adds a task (`add`). The candidate
enumeration is public and shared: workflow transitions with their rows and drawn arguments,
parent references, sweeps over a whole state, the anchor's rows and the addressable contacts.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, NamedTuple

from worldfactory.dates import date_meaning
from worldfactory.seeds import stage_rng
from worldfactory.spec import (
    ColumnDef,
    Difficulty,
    Param,
    TableDef,
    Task,
    ToolCall,
    Transition,
    Vocabulary,
    WorldSpec,
    has_name,
)

from ..data import draw_value, open_image
from ..handbook import TABLE as HANDBOOK_TABLE
from ..handbook import HandbookRule, in_band, steps_by_name
from ..rows import fetch_dicts
from ..workflow import FREE_TEXT_CHOICES, guards_hold, id_param, related_reads, task_value, with_related
from .clock import clock_refusal
from .words import cap, human, in_state, of_parent, tool_name, when

SEARCH_MAX = 500  # the largest page a plan asks a search tool for
ATTRIBUTE_SHARE = 0.45  # of main records named by what a person knows of them, where that names one record
SEARCH_FLOOR = 0.34  # below this share of tasks that need a search, attributes name every record they can
SEARCH_CHECK_AFTER = 20  # tasks made before the share is watched
CHANGE = "change the {field} of {obj} to {value}"


@dataclass
class Address:
    """How a person refers to a record, and the lookups that find it."""

    text: str
    lookup: list[ToolCall]


class Sweep(NamedTuple):
    """Every row of a table in one state, all able to take one transition with the same arguments."""

    table: TableDef
    transition: Transition
    state: str
    args: dict[str, Any]
    rows: list[dict[str, Any]]


class TaskBuilder:
    def __init__(self, spec: WorldSpec, tool_names: set[str], seed_image: bytes,
                 validate: Callable[[Task], bool] | None = None, vocab: Vocabulary | None = None) -> None:
        self.spec = spec
        self.vocab = vocab
        self.validate = validate
        self.tools = tool_names
        self.conn = open_image(seed_image)
        self.rng: random.Random = stage_rng(spec.brief.generation_seed, "tasks")
        self.rules = spec.brief.rules
        self.today = spec.brief.clock
        # steps the clock forbids (tool, record id) -> reason; and tasks refused for one, by reason (clock.py)
        self.clock_refusals: dict[tuple[str, int], str] = {}
        self.clock_refused_tasks: Counter[str] = Counter()
        # the handbook's guarded steps, where the world has its handbook: a record in a step's near-limit band
        # is the handbook family's alone (any other instruction would contradict the handbook); tasks refused
        # for one, by family
        self.handbook_steps: dict[str, HandbookRule] = (
            steps_by_name(spec, self.conn) if f"search_{HANDBOOK_TABLE}" in tool_names else {})
        self.handbook_refused_tasks: Counter[str] = Counter()
        self.steps = {tr.name: (t, tr) for t in spec.tables if t.workflow for tr in t.workflow.transitions}
        self.tasks: list[Task] = []
        self.instructions: set[str] = set()
        self.named_ids: dict[str, list[int]] = {}  # per table: the ids of rows a person can name, by id
        # Searches that find a record a parameter names (not the task's own record), by identity; kept alive
        # so that their ids stay theirs.
        self.ref_lookups: list[ToolCall] = []
        self.ref_lookup_ids: set[int] = set()

    def close(self) -> None:
        self.conn.close()

    # -- addressing ------------------------------------------------------------------------

    def address(self, table: TableDef, row: dict[str, Any], plain: bool = False) -> Address | None:
        """How a person names the record: its label ("claim CLM-000204"), or (for a share of main records,
        never for ``plain`` ones such as a parent inside another address) what a person knows of it, so
        the agent has to search ("the claim on policy POL-000123 filed on 2026-03-02")."""
        drawn = self.rng.random() < ATTRIBUTE_SHARE  # drawn every time: the stream stays as it was
        if not plain and (drawn or self.searches_short()):
            found = self._address_by_attributes(table, row)
            if found is not None:
                return found
        if has_name(table):
            value = row[table.label]
            search = ToolCall(tool=f"search_{table.name}", args={table.label: value})
            return Address(f"{table.singular} {value}", [search])
        wf = table.workflow
        if not wf or wf.column not in table.search:
            return self._address_by_parents(table, row)
        for col in self.parent_refs(table):
            parent_table = self.spec.table(col.ref or "")
            parent = self.row(parent_table, row[col.name])
            if parent is None:
                continue
            same = self.conn.execute(
                f"SELECT count(*) FROM {table.name} WHERE {col.name} = ? AND {wf.column} = ?",
                (row[col.name], row[wf.column]),
            ).fetchone()[0]
            paddr = self.address(parent_table, parent, plain=True)
            if same != 1 or paddr is None:
                continue
            text = f"the {in_state(table.singular, row[wf.column])} of {paddr.text}"
            search = ToolCall(tool=f"search_{table.name}", args={col.name: row[col.name], wf.column: row[wf.column]})
            return Address(text, paddr.lookup + [search])
        return None

    def _address_by_attributes(self, table: TableDef, row: dict[str, Any]) -> Address | None:
        """The record as the one of its parent's records on a date ("the claim on policy POL-000123 filed on
        2026-03-02"), when no other record of that parent shares the date; the agent must search for it."""
        dates = [c for c in table.columns if c.type == "date" and c.name in table.search and row[c.name]]
        for col in self.parent_refs(table) if dates else []:
            if row[col.name] is None:
                continue
            parent_table = self.spec.table(col.ref or "")
            parent = self.row(parent_table, row[col.name])
            paddr = self.address(parent_table, parent, plain=True) if parent else None
            if paddr is None:
                continue
            for day in dates:
                same = self.conn.execute(f"SELECT count(*) FROM {table.name} WHERE {col.name} = ? AND {day.name} = ?",
                                         (row[col.name], row[day.name])).fetchone()[0]
                if same != 1:
                    continue
                search = ToolCall(tool=f"search_{table.name}", args={
                    col.name: row[col.name], f"{day.name}_from": row[day.name], f"{day.name}_to": row[day.name]})
                dated = when(day, row[day.name])
                link = of_parent(col, parent_table, paddr.text)
                text = (f"the {table.singular} {link} {dated}" if link.startswith("of ")
                        else f"the {table.singular} {dated} {link}")
                return Address(text, paddr.lookup + [search])
        return None

    def _address_by_parents(self, table: TableDef, row: dict[str, Any]) -> Address | None:
        """A record with no name of its own, named by the one or two records it belongs to when no other
        record of its table shares them ("the inventory level of product X at warehouse Y")."""
        refs = [c for c in self.parent_refs(table) if row[c.name] is not None]
        for group in [[c] for c in refs] + [[a, b] for i, a in enumerate(refs) for b in refs[i + 1:]]:
            where = " AND ".join(f"{c.name} = ?" for c in group)
            if self.conn.execute(f"SELECT count(*) FROM {table.name} WHERE {where}",
                                 tuple(row[c.name] for c in group)).fetchone()[0] != 1:
                continue
            parts: list[str] = []
            lookup: list[ToolCall] = []
            for c in group:
                parent_table = self.spec.table(c.ref or "")
                parent = self.row(parent_table, row[c.name])
                paddr = self.address(parent_table, parent, plain=True) if parent else None
                if paddr is None:
                    break
                own = c.human == parent_table.singular  # "product_id" says "product": no need to name the column
                if not parts:
                    parts.append(of_parent(c, parent_table, paddr.text))
                else:
                    parts.append(f"at {paddr.text}" if own else f"and {c.human} {paddr.text}")
                lookup += paddr.lookup
            else:
                search = ToolCall(tool=f"search_{table.name}", args={c.name: row[c.name] for c in group})
                return Address(f"the {table.singular} {' '.join(parts)}", lookup + [search])
        return None

    def getter(self, table: TableDef, row: dict[str, Any]) -> list[ToolCall]:
        """Reading the record before acting on it, as a careful operator would."""
        name = tool_name(table, "get")
        return [ToolCall(tool=name, args={id_param(table): row["id"]})] if name in self.tools else []

    def notify(self, table: TableDef, row: dict[str, Any], what: str, said_as: str = ""
               ) -> tuple[str, list[ToolCall]] | None:
        """Email the party the record concerns about it: the instruction's clause and the calls it takes.

        The party is the pack's `notify` column (the policyholder of a claim), else the record's owner
        (its first reference to a user: the adjuster), else a contact chosen from the stream. ``said_as``
        is how the instruction names the record: its label goes into the subject only if that gives it."""
        if "create_email" not in self.tools:
            return None
        label = row.get(table.label) if table.label else None
        if label is not None and str(label) not in said_as:
            label = None  # a record the instruction describes keeps its code out of the subject line too
        subject = f"{cap(table.singular)} {label}: {what}" if label else f"{cap(table.singular)} update: {what}"
        body = f"Update on the {table.singular}: {what}."
        party = self._party(table, row)
        if party is not None:
            who, lookups, address = party
            return (f"email {who} about it with the subject \"{subject}\"",
                    lookups + [ToolCall(tool="create_email", args={"subject": subject, "body": body,
                                                                    "to_address": address})])
        if not self.has_table("contacts"):
            return None
        contacts = self.spec.table("contacts")
        rows = self.rows(contacts)
        contact = self.rng.choice(rows) if rows else None
        caddr = self.address(contacts, contact) if contact else None
        if contact is None or caddr is None:
            return None
        calls = caddr.lookup + [ToolCall(tool="create_email", args={
            "subject": subject, "body": body, "contact_id": contact["id"]})]
        return f"email {caddr.text} about it with the subject \"{subject}\"", calls  # "contact X": where to look

    def _party(self, table: TableDef, row: dict[str, Any]) -> tuple[str, list[ToolCall], str] | None:
        """Who a record concerns, as the instruction names them, the reads that find their address, and
        the address; None when the record names nobody with an email address."""
        emails = self.spec.table("emails") if self.has_table("emails") else None
        if emails is None or "to_address" not in {c.name for c in emails.columns}:
            return None  # an email module without addresses: contacts only
        paths = [table.notify.split(".")] if table.notify else [[c.name] for c in table.columns if c.ref == "users"]
        for path in paths:
            at, person, col = table, row, table.column(path[0])
            for name in path:  # follow the references: a claim's policy's policyholder
                col = at.column(name)
                at = self.spec.table(col.ref or "")
                person = self.row(at, person[name]) if person and person[name] is not None else None
            if person is None or not person.get("email"):
                continue
            reads = self.getter(at, person)
            if not reads:
                continue
            said = person.get(at.label) if at.label else None
            if table.notify:  # the party the record concerns: "the policyholder (Tomas Dahl)"
                who = f"the {at.singular if len(path) > 1 else col.human} ({said})" if said else f"the {col.human}"
            elif said:  # an internal owner, by role and name ("the account owner (Jonas Park)"): who, and where to look
                who = f"the {col.human} ({said})"
            else:
                continue
            return who, reads, str(person["email"])  # the record itself is read before it is acted on
        return None

    def clock_allows(self, table: TableDef, tr: Transition, row: dict[str, Any], args: dict[str, Any]) -> bool:
        """Whether the world's clock allows the step on the record (clock.py); a refusal is remembered."""
        refused = clock_refusal(table, tr, row, args, self.today)
        if refused is not None:
            self.clock_refusals[(tr.name, row["id"])] = refused[0]
        return refused is None

    def clock_forbids(self, asked: list[ToolCall]) -> str | None:
        """The reason the clock forbids one of the steps a task asks for, on a record of the seed; else None.
        A record the task itself creates is not in the seed: its dates are the task's own."""
        for call in asked:
            if call.tool not in self.steps:
                continue
            table, tr = self.steps[call.tool]
            row = self.row(table, call.args.get(id_param(table)))
            if row is not None and not self.clock_allows(table, tr, row, call.args):
                return self.clock_refusals[(tr.name, row["id"])]
        return None

    def in_handbook_band(self, tr: Transition, row: dict[str, Any], args: dict[str, Any]) -> bool:
        """Whether the handbook's near-limit exception forbids the step on the record though the tool allows it."""
        hr = self.handbook_steps.get(tr.name)
        return hr is not None and in_band(hr, row, args, self.rules)

    def handbook_forbids(self, oracle: list[ToolCall]) -> bool:
        """Whether the plan takes a handbook step on a seed record in that step's near-limit band: an agent that
        reads the handbook takes the alternative and escalates, so the plan would grade it wrong."""
        for call in oracle:
            hr = self.handbook_steps.get(call.tool)
            row = self.row(hr.table, call.args.get(id_param(hr.table))) if hr is not None else None
            if hr is not None and row is not None and self.in_handbook_band(hr.step, row, call.args):
                return True
        return False

    def add(self, family: str, instruction: str, oracle: list[ToolCall], target: str,
            answer: Any = None, answer_type: str | None = None, trap: list[ToolCall] | None = None,
            distractors: int = 0, rules: int | None = None, requester: dict[str, str] | None = None,
            declined_calls: list[ToolCall] | None = None, asked: list[ToolCall] | None = None) -> bool:
        """Add a task unless its instruction repeats one, the clock forbids a step it asks for (its oracle's,
        and ``asked``: the steps its instruction names that the oracle does not take), its oracle takes a step
        the handbook's near-limit exception forbids (outside the handbook family), or its oracle does not
        replay cleanly."""
        if instruction in self.instructions:
            return False
        forbidden = self.clock_forbids(oracle + (asked or []))
        if forbidden is not None:
            self.clock_refused_tasks[forbidden] += 1
            return False
        if family != "handbook" and self.handbook_forbids(oracle):
            self.handbook_refused_tasks[family] += 1
            return False
        n = sum(1 for t in self.tasks if t.family == family) + 1
        task = Task(task_id=f"{family}-{n:03d}", family=family, instruction=instruction, oracle=oracle,
                    answer=answer, answer_type=answer_type, target=target,
                    needs_search=self.needs_search(target, oracle),
                    difficulty=difficulty_of(oracle, self.ref_lookup_ids, distractors, rules), trap=trap or [],
                    requester=requester or {}, declined_calls=declined_calls or [])
        if self.validate is not None and not self.validate(task):
            return False
        self.instructions.add(instruction)
        self.tasks.append(task)
        return True

    def create_args(self, table: TableDef, fixed: dict[str, Any], tag: str
                    ) -> tuple[dict[str, Any], list[str], list[ToolCall]] | None:
        """Arguments for create_<table> with everything not fixed chosen and said in words, and the
        searches that find the records it refers to; None when a column cannot be said."""
        args: dict[str, Any] = {}
        said: list[str] = []
        lookups: list[ToolCall] = []
        for name in table.create or []:
            col = table.column(name)
            if name in fixed:
                args[name] = fixed[name]
                continue
            if col.nullable:
                continue  # optional: a person leaves it out
            if col.ref:
                target = self.spec.table(col.ref)
                if not has_name(target):
                    return None
                rows = self.rows_in(target, col.ref_states) if col.ref_states else self.rows(target)
                if not rows:
                    return None
                row = self.rng.choice(rows)
                args[name] = row["id"]
                lookups.append(ToolCall(tool=f"search_{target.name}", args={target.label: row[target.label]}))
                same = col.human in (target.singular, *target.singular.split())  # "item": "stock item X"
                named = col.human.endswith(f" {target.singular}")  # "booked resource": "booked resource X"
                said.append(f"{target.singular} {row[target.label]}" if same or target.singular.startswith(col.human)
                            else f"{col.human} {row[target.label]}" if named
                            else f"{col.human} {target.singular} {row[target.label]}")
            elif col.enum:
                args[name] = self.rng.choice(col.enum)
                said.append(f"{col.human} {human(args[name])}")
            elif col.type in ("money", "number", "integer"):
                lo = col.minimum if col.minimum is not None else 1.0
                hi = col.maximum if col.maximum is not None else max(lo + 1.0, 2000.0)
                value = self.rng.uniform(lo + (hi - lo) * 0.1, lo + (hi - lo) * 0.4)
                args[name] = int(value) if col.type == "integer" else round(value, 2)
                said.append(f"{col.human} ${args[name]:,.2f}" if col.type == "money" else f"{col.human} {args[name]}")
            elif col.type == "date":  # an event happened (days ago); a plan or a period lies ahead
                ahead = timedelta(days=self.rng.randint(3, 30))
                today = date.fromisoformat(self.today)
                day = today - ahead if date_meaning(col) == "event" else today + ahead
                args[name] = day.isoformat()
                said.append(f"{col.human} {args[name]}")
            elif col.type == "text":
                value = self.drawn_text(table, col, args) if not col.free_text else None
                if value is None and col.free_text:
                    value = self.rng.choice(FREE_TEXT_CHOICES)
                elif value is None:
                    value = f"{cap(tag)} {self.rng.randint(100, 999)}"
                args[name] = value
                said.append(f"{col.human} \"{value}\"")
            else:
                return None
        return args, said, lookups

    def drawn_text(self, table: TableDef, col: ColumnDef, row: dict[str, Any]) -> str | None:
        """A text value from the column's own generator (a person's name, the next code), unused in the
        table when the column is unique; None when the generator cannot serve a task."""
        if col.gen is None or self.vocab is None:
            return None
        for _ in range(8):
            try:
                value = draw_value(self.spec, self.vocab, self.rng, col, row, self.next_id(table))
            except (KeyError, ValueError, TypeError):
                return None
            if not isinstance(value, str):
                return None
            taken = col.unique and self.conn.execute(
                f"SELECT 1 FROM {table.name} WHERE {col.name} = ?", (value,)).fetchone()
            if not taken:
                return value
        return None

    def update_change(self, table: TableDef, row: dict[str, Any]
                          ) -> tuple[str, dict[str, str], list[ToolCall], dict[str, Any]] | None:
        """A change to one updatable column: the verb's template (``{obj}`` and the words it names, filled in
        one pass, so pack text in the words is never read as a placeholder), the lookups it needs, the arguments."""
        col = table.column(self.rng.choice(table.update))
        if col.enum:
            options = [v for v in col.enum if v != row[col.name]]
            value: Any = self.rng.choice(options)
            return CHANGE, {"field": col.human, "value": human(value)}, [], {col.name: value}
        if col.ref:
            target = self.spec.table(col.ref)
            if not (target.label and target.label in target.search):
                return None
            others = self.rows_except(target, row[col.name])
            if not others:
                return None
            other = self.rng.choice(others)
            lookup = ToolCall(tool=f"search_{target.name}", args={target.label: other[target.label]})
            words = {"thing": target.singular, "name": other[target.label], "field": col.human}
            return "make {thing} {name} the {field} of {obj}", words, [lookup], {col.name: other["id"]}
        if col.type in ("money", "number") and row[col.name] is not None:
            value = round(float(row[col.name]) * self.rng.choice([0.8, 0.9, 1.1, 1.25]), 2)
            said = f"${value:,.2f}" if col.type == "money" else f"{value:g}"
            return CHANGE, {"field": col.human, "value": said}, [], {col.name: value}
        if col.type == "integer" and row[col.name] is not None:
            step = max(1, round(abs(int(row[col.name])) * self.rng.choice([0.1, 0.2, 0.25])))
            value = int(row[col.name]) + self.rng.choice([-step, step])
            if col.minimum is not None and value < col.minimum:
                value = int(row[col.name]) + step
            return CHANGE, {"field": col.human, "value": value}, [], {col.name: value}
        if col.type == "text" and not col.free_text:
            text = self.drawn_text(table, col, dict(row))
            if text is None or text == row[col.name]:
                return None
            return CHANGE, {"field": col.human, "value": text}, [], {col.name: text}
        return None

    def searches_short(self) -> bool:
        """Whether the world has fallen under its share of tasks that need a search (past its first tasks):
        then every main record that attributes can name is named that way until it is back."""
        made = len(self.tasks)
        return made >= SEARCH_CHECK_AFTER and sum(t.needs_search for t in self.tasks) < SEARCH_FLOOR * made

    def needs_search(self, target: str, oracle: list[ToolCall]) -> bool:
        """Whether the agent must search for the task's records by what it knows of them (a parent and a
        date, a status), rather than look one up by the code or name the instruction gives."""
        table = next((t for t in self.spec.tables if t.name == target), None)
        if table is None:
            return False
        searches = [c for c in oracle if c.tool == f"search_{table.name}"
                    and id(c) not in self.ref_lookup_ids]  # a record a parameter names is not the task's own
        return bool(searches) and not any(table.label and table.label in c.args for c in searches)

    # -- rows ------------------------------------------------------------------------------

    def has_table(self, name: str) -> bool:
        return name in {t.name for t in self.spec.tables}

    def rows(self, table: TableDef) -> list[dict[str, Any]]:
        """Every row of the table, by id."""
        return self._related(table, fetch_dicts(self.conn, f"SELECT * FROM {table.name} ORDER BY id"))

    def _related(self, table: TableDef, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows with the values of related records their guards read (`ref.<column>.<name>`)."""
        if not related_reads(table):
            return rows
        return with_related(self.conn, {t.name: t for t in self.spec.tables}, table, rows)

    def row(self, table: TableDef, row_id: Any) -> dict[str, Any] | None:
        found = self._related(table, fetch_dicts(self.conn, f"SELECT * FROM {table.name} WHERE id = ?", (row_id,)))
        return found[0] if found else None

    def next_id(self, table: TableDef) -> int:
        """The id the table's next created row gets."""
        return int(self.conn.execute(f"SELECT coalesce(max(id), 0) FROM {table.name}").fetchone()[0]) + 1

    def rows_except(self, table: TableDef, row_id: Any) -> list[dict[str, Any]]:
        """Every row of the table but one (all of them when ``row_id`` is None), by id."""
        return self._related(table, fetch_dicts(self.conn, f"SELECT * FROM {table.name} WHERE id IS NOT ? "
                                                "ORDER BY id", (row_id,)))

    def rows_in(self, table: TableDef, states: list[str]) -> list[dict[str, Any]]:
        """The rows of a workflow table in any of the states, by id."""
        assert table.workflow is not None
        marks = ", ".join("?" * len(states))
        return self._related(table, fetch_dicts(
            self.conn, f"SELECT * FROM {table.name} WHERE {table.workflow.column} IN ({marks}) ORDER BY id",
            tuple(states)))

    def children(self, table: TableDef, col: ColumnDef, parent_id: Any) -> list[dict[str, Any]]:
        """The rows of the table whose reference column points at the parent, by id."""
        return fetch_dicts(self.conn, f"SELECT * FROM {table.name} WHERE {col.name} = ? ORDER BY id", (parent_id,))

    # -- candidates ------------------------------------------------------------------------

    def transitions(self) -> list[tuple[TableDef, Transition]]:
        """Every workflow transition that has a tool, with its table, in spec order."""
        return [(t, tr) for t in self.spec.tables if t.workflow for tr in t.workflow.transitions
                if tr.name in self.tools]

    def task_args(self, tr: Transition, row: dict[str, Any]) -> dict[str, Any]:
        """The arguments a task passes to the transition for the row (choices drawn from the stream)."""
        return {p.name: self._ref_choice(tr, p, row) if p.ref and (p.task_value or "choice") == "choice"
                else task_value(p, row, self.rng) for p in tr.params}

    def _ref_choice(self, tr: Transition, p: Param, row: dict[str, Any]) -> int | None:
        """A record of the parameter's table that a person can name, drawn from the stream; never the one the
        row already holds in the column the transition writes the parameter to ("reassign to someone else")."""
        table = self.spec.table(p.ref or "")
        if table.name not in self.named_ids:
            label = table.label if has_name(table) else None
            self.named_ids[table.name] = [r["id"] for r in self.rows(table) if label and r[label] is not None]
        held = [row.get(col) for col, value in tr.set.items() if value == f"${p.name}"]
        ids = [i for i in self.named_ids[table.name] if i not in held]
        return self.rng.choice(ids) if ids else None

    def said_args(self, tr: Transition, args: dict[str, Any]) -> tuple[dict[str, Any], list[ToolCall]] | None:
        """The arguments as an instruction says them, for render_verb: a record a parameter refers to by its
        label ("Kai Petrov", "CRW-07"; the verb says what it is), with the searches that find its id, which the
        plan makes before the call. None when such a record cannot be named."""
        said = dict(args)
        lookups: list[ToolCall] = []
        for p in tr.params:
            if not p.ref or p.name not in args:
                continue
            table = self.spec.table(p.ref)
            label = table.label if has_name(table) else None
            target = self.row(table, args[p.name]) if label and args[p.name] is not None else None
            if target is None or label is None or target[label] is None:
                return None
            said[p.name] = target[label]
            lookups.append(ToolCall(tool=f"search_{table.name}", args={label: target[label]}))
        self.ref_lookups += lookups
        self.ref_lookup_ids |= {id(c) for c in lookups}
        return said, lookups

    def transition_rows(self, table: TableDef, tr: Transition, states: list[str]
                        ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Each row in the states with the arguments drawn for it, by id."""
        return [(row, self.task_args(tr, row)) for row in self.rows_in(table, states)]

    def uniform_transitions(self) -> list[tuple[TableDef, Transition]]:
        """Transitions whose arguments do not depend on the row, on tables searchable by state:
        one call's arguments serve every row of a group. Not a step the pack keeps out of bulk (`bulk: false`):
        this is where bulk, sweep and year-end tasks find their steps."""
        out = []
        for table, tr in self.transitions():
            if not tr.bulk or any(p.task_value and p.task_value.startswith("row.") for p in tr.params):
                continue
            assert table.workflow is not None
            if table.workflow.column in table.search:
                out.append((table, tr))
        return out

    def parent_refs(self, table: TableDef) -> list[ColumnDef]:
        """The table's searchable references to other tables whose records a person can name."""
        out = []
        for c in table.columns:
            if c.ref and c.name in table.search and c.ref != table.name:
                if has_name(self.spec.table(c.ref)):
                    out.append(c)
        return out

    def parent_ids(self, table: TableDef, col: ColumnDef) -> list[Any]:
        """The distinct parents the table's rows point at through the column, sorted."""
        return sorted(r[0] for r in self.conn.execute(
            f"SELECT DISTINCT {col.name} FROM {table.name} WHERE {col.name} IS NOT NULL"))

    def sweeps(self) -> list[Sweep]:
        """Every (table, transition, state) whose rows (1 to SEARCH_MAX) can all take the transition with
        one set of arguments, drawn from the first row. Not a transition that names another record (a crew,
        an approver): nobody hands every record of a status to one person; bulk tasks do it per parent."""
        out = []
        for table, tr in self.uniform_transitions():
            if any(p.ref for p in tr.params):
                continue
            for state in tr.from_:
                rows = self.rows_in(table, [state])
                if not rows or len(rows) > SEARCH_MAX:
                    continue
                args = self.task_args(tr, rows[0])
                if all(guards_hold(tr, r, args, self.rules, self.today) and self.clock_allows(table, tr, r, args)
                       for r in rows):
                    out.append(Sweep(table, tr, state, args, rows))
        return out

    def anchor_rows(self) -> tuple[TableDef, list[dict[str, Any]]]:
        """The domain's core table and its rows, by id."""
        table = self.spec.table(self.spec.anchor)
        return table, self.rows(table)

    def contacts(self) -> list[tuple[dict[str, Any], Address]]:
        """The contacts a person can name, with their addresses, by id."""
        if not self.has_table("contacts"):
            return []
        table = self.spec.table("contacts")
        out = []
        for row in self.rows(table):
            addr = self.address(table, row)
            if addr is not None:
                out.append((row, addr))
        return out


RULE_READS = ("search_business_rules", "get_business_rule")
HANDBOOK_READS = ("search_handbook_sections", "get_handbook_section")


def difficulty_of(oracle: list[ToolCall], ref_lookups: set[int], distractors: int = 0,
                  rules: int | None = None) -> Difficulty:
    """A task's difficulty features, counted from its plan: rules are the distinct rules it reads (unless the
    family says how many interact); records to discover are its searches for records (not for rules or
    handbook sections, nor for a record a parameter names by its label)."""
    read = {str(c.args.get("name") or c.args.get("topic") or c.args) for c in oracle if c.tool in RULE_READS}
    searches = [c for c in oracle if c.tool.startswith("search_") and c.tool not in RULE_READS + HANDBOOK_READS
                and id(c) not in ref_lookups]
    return Difficulty(oracle_calls=len(oracle), distinct_tools=len({c.tool for c in oracle}),
                      distractors=distractors, rules=len(read) if rules is None else rules,
                      records_to_discover=len(searches))


def sweep_calls(sweep: Sweep) -> list[ToolCall]:
    """Find every row of the sweep's state, then move each."""
    table, tr, state, args, rows = sweep
    assert table.workflow is not None
    search = ToolCall(tool=f"search_{table.name}", args={table.workflow.column: state, "limit": SEARCH_MAX})
    return [search] + [ToolCall(tool=tr.name, args={id_param(table): r["id"], **args}) for r in rows]

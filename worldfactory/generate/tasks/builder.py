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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from worldfactory.seeds import stage_rng
from worldfactory.spec import ColumnDef, TableDef, Task, ToolCall, Transition, WorldSpec

from ..data import fetch_dicts, open_image
from ..workflow import guards_hold, id_param, task_value
from .words import cap, human, tool_name

SEARCH_MAX = 500  # the largest page a plan asks a search tool for


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
                 validate: Callable[[Task], bool] | None = None) -> None:
        self.spec = spec
        self.validate = validate
        self.tools = tool_names
        self.conn = open_image(seed_image)
        self.rng: random.Random = stage_rng(spec.brief.generation_seed, "tasks")
        self.rules = spec.brief.rules
        self.tasks: list[Task] = []
        self.instructions: set[str] = set()

    def close(self) -> None:
        self.conn.close()

    # -- addressing ------------------------------------------------------------------------

    def address(self, table: TableDef, row: dict[str, Any]) -> Address | None:
        if table.label and table.column(table.label).unique and table.label in table.search:
            value = row[table.label]
            search = ToolCall(tool=f"search_{table.name}", args={table.label: value})
            return Address(f"{table.singular} {value}", [search])
        wf = table.workflow
        if not wf or wf.column not in table.search:
            return None
        for col in self.parent_refs(table):
            parent_table = self.spec.table(col.ref or "")
            parent = self.row(parent_table, row[col.name])
            if parent is None:
                continue
            same = self.conn.execute(
                f"SELECT count(*) FROM {table.name} WHERE {col.name} = ? AND {wf.column} = ?",
                (row[col.name], row[wf.column]),
            ).fetchone()[0]
            paddr = self.address(parent_table, parent)
            if same != 1 or paddr is None:
                continue
            text = f"the {human(row[wf.column])} {table.singular} of {paddr.text}"
            search = ToolCall(tool=f"search_{table.name}", args={col.name: row[col.name], wf.column: row[wf.column]})
            return Address(text, paddr.lookup + [search])
        return None

    def getter(self, table: TableDef, row: dict[str, Any]) -> list[ToolCall]:
        """Reading the record before acting on it, as a careful operator would."""
        name = tool_name(table, "get")
        return [ToolCall(tool=name, args={id_param(table): row["id"]})] if name in self.tools else []

    def notify(self, table: TableDef, row: dict[str, Any], what: str) -> tuple[str, list[ToolCall]] | None:
        """Email a contact about the record: the instruction's clause and the calls it takes."""
        if "create_email" not in self.tools or not self.has_table("contacts"):
            return None
        contacts = self.spec.table("contacts")
        rows = self.rows(contacts)
        contact = self.rng.choice(rows) if rows else None
        caddr = self.address(contacts, contact) if contact else None
        if contact is None or caddr is None:
            return None
        label = row.get(table.label) if table.label else None
        subject = f"{cap(table.singular)} {label}: {what}" if label else f"{cap(table.singular)} update: {what}"
        calls = caddr.lookup + [ToolCall(tool="create_email", args={
            "subject": subject, "body": f"Update on the {table.singular}: {what}.", "contact_id": contact["id"]})]
        return f"email {caddr.text.removeprefix('contact ')} about it with the subject \"{subject}\"", calls

    def add(self, family: str, instruction: str, oracle: list[ToolCall], target: str,
            answer: Any = None, answer_type: str | None = None) -> bool:
        """Add a task unless its instruction repeats one or its oracle does not replay cleanly."""
        if instruction in self.instructions:
            return False
        n = sum(1 for t in self.tasks if t.family == family) + 1
        task = Task(task_id=f"{family}-{n:03d}", family=family, instruction=instruction, oracle=oracle,
                    answer=answer, answer_type=answer_type, target=target)
        if self.validate is not None and not self.validate(task):
            return False
        self.instructions.add(instruction)
        self.tasks.append(task)
        return True

    # -- rows ------------------------------------------------------------------------------

    def has_table(self, name: str) -> bool:
        return name in {t.name for t in self.spec.tables}

    def rows(self, table: TableDef) -> list[dict[str, Any]]:
        """Every row of the table, by id."""
        return fetch_dicts(self.conn, f"SELECT * FROM {table.name} ORDER BY id")

    def row(self, table: TableDef, row_id: Any) -> dict[str, Any] | None:
        found = fetch_dicts(self.conn, f"SELECT * FROM {table.name} WHERE id = ?", (row_id,))
        return found[0] if found else None

    def next_id(self, table: TableDef) -> int:
        """The id the table's next created row gets."""
        return int(self.conn.execute(f"SELECT coalesce(max(id), 0) FROM {table.name}").fetchone()[0]) + 1

    def rows_except(self, table: TableDef, row_id: Any) -> list[dict[str, Any]]:
        """Every row of the table but one, by id."""
        return fetch_dicts(self.conn, f"SELECT * FROM {table.name} WHERE id <> ? ORDER BY id", (row_id,))

    def rows_in(self, table: TableDef, states: list[str]) -> list[dict[str, Any]]:
        """The rows of a workflow table in any of the states, by id."""
        assert table.workflow is not None
        marks = ", ".join("?" * len(states))
        return fetch_dicts(self.conn, f"SELECT * FROM {table.name} WHERE {table.workflow.column} IN ({marks}) "
                           "ORDER BY id", tuple(states))

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
        return {p.name: task_value(p, row, self.rng) for p in tr.params}

    def transition_rows(self, table: TableDef, tr: Transition, states: list[str]
                        ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Each row in the states with the arguments drawn for it, by id."""
        return [(row, self.task_args(tr, row)) for row in self.rows_in(table, states)]

    def uniform_transitions(self) -> list[tuple[TableDef, Transition]]:
        """Transitions whose arguments do not depend on the row, on tables searchable by state:
        one call's arguments serve every row of a group."""
        out = []
        for table, tr in self.transitions():
            if any(p.task_value and p.task_value.startswith("row.") for p in tr.params):
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
                target = self.spec.table(c.ref)
                if target.label and target.column(target.label).unique and target.label in target.search:
                    out.append(c)
        return out

    def parent_ids(self, table: TableDef, col: ColumnDef) -> list[Any]:
        """The distinct parents the table's rows point at through the column, sorted."""
        return sorted({r[col.name] for r in fetch_dicts(self.conn, f"SELECT {col.name} FROM {table.name}")
                       if r[col.name] is not None})

    def sweeps(self) -> list[Sweep]:
        """Every (table, transition, state) whose rows (1 to SEARCH_MAX) can all take the transition with
        one set of arguments, drawn from the first row."""
        out = []
        for table, tr in self.uniform_transitions():
            for state in tr.from_:
                rows = self.rows_in(table, [state])
                if not rows or len(rows) > SEARCH_MAX:
                    continue
                args = self.task_args(tr, rows[0])
                if all(guards_hold(tr, r, args, self.rules) for r in rows):
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


def sweep_calls(sweep: Sweep) -> list[ToolCall]:
    """Find every row of the sweep's state, then move each."""
    table, tr, state, args, rows = sweep
    assert table.workflow is not None
    search = ToolCall(tool=f"search_{table.name}", args={table.workflow.column: state, "limit": SEARCH_MAX})
    return [search] + [ToolCall(tool=tr.name, args={id_param(table): r["id"], **args}) for r in rows]

"""Stage 5: tasks with oracle plans, generated from the spec and the seed data.

Families come from the spec, not from per-domain lists, so every domain pack gets them:
- lookup_act: find a record as a person names it, then act on it (transition or update);
- conditional: check a business rule, then take one of two actions;
- bulk: act on every record that matches a predicate (also whole-state sweeps, and one
  year-end close of 1,000 calls or more);
- workflow: create and link records, then notify a contact (see task_compound.py);
- retrieval: answer a question exactly (count, sum, field, list);
- decline: a request a business rule forbids; nothing may change and the answer names the rule.
Instructions name records by their human label (names, numbers), never internal ids. When a
validator is given (the tasks stage passes one that replays the oracle), a task whose oracle
does not run cleanly is never added.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worldfactory.build.data import fetch_dicts as _rows
from worldfactory.build.data import open_image
from worldfactory.build.workflow import guards_hold, id_param, render_verb, slug, task_value
from worldfactory.seeds import stage_rng
from worldfactory.spec import ColumnDef, TableDef, Task, ToolCall, Transition, WorldSpec

FAMILY_QUOTAS = {"lookup_act": 24, "conditional": 16, "bulk": 16, "sweep": 7, "workflow": 22, "retrieval": 20,
                 "decline": 8}
BULK_MAX = 40
SEARCH_MAX = 500

ACT_PHRASES = ["{Verb}.", "Please {verb}.", "We need to {verb}.", "Could you {verb}?", "Go ahead and {verb}."]
COND_PHRASES = [
    "Check {obj}: if {says}, {a}; otherwise {b}.",
    "Handle {obj}. If {says}, {a}. If not, {b}.",
    "Review {obj} against our rules: when {says}, {a}; when it is not, {b}.",
]
BULK_PHRASES = ["{Verb}.", "Please {verb}.", "Clean up: {verb}."]


@dataclass
class Address:
    """How a person refers to a record, and the lookups that find it."""

    text: str
    lookup: list[ToolCall]



def _human(value: Any) -> str:
    return str(value).replace("_", " ")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


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

    # -- addressing ------------------------------------------------------------------------

    def address(self, table: TableDef, row: dict[str, Any]) -> Address | None:
        if table.label and table.column(table.label).unique and table.label in table.search:
            value = row[table.label]
            search = ToolCall(tool=f"search_{table.name}", args={table.label: value})
            return Address(f"{table.singular} {value}", [search])
        wf = table.workflow
        if not wf or wf.column not in table.search:
            return None
        for col in self._parent_refs(table):
            parent_table = self.spec.table(col.ref or "")
            parent = _rows(self.conn, f"SELECT * FROM {parent_table.name} WHERE id = ?", (row[col.name],))
            if not parent:
                continue
            same = self.conn.execute(
                f"SELECT count(*) FROM {table.name} WHERE {col.name} = ? AND {wf.column} = ?",
                (row[col.name], row[wf.column]),
            ).fetchone()[0]
            paddr = self.address(parent_table, parent[0])
            if same != 1 or paddr is None:
                continue
            text = f"the {_human(row[wf.column])} {table.singular} of {paddr.text}"
            search = ToolCall(tool=f"search_{table.name}", args={col.name: row[col.name], wf.column: row[wf.column]})
            return Address(text, paddr.lookup + [search])
        return None

    def _parent_refs(self, table: TableDef) -> list[ColumnDef]:
        out = []
        for c in table.columns:
            if c.ref and c.name in table.search and c.ref != table.name:
                target = self.spec.table(c.ref)
                if target.label and target.column(target.label).unique and target.label in target.search:
                    out.append(c)
        return out

    # -- helpers ---------------------------------------------------------------------------

    def add(self, family: str, instruction: str, oracle: list[ToolCall], target: str,
            answer: Any = None, answer_type: str | None = None) -> bool:
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

    def getter(self, table: TableDef, row: dict[str, Any]) -> list[ToolCall]:
        """Reading the record before acting on it, as a careful operator would."""
        name = f"get_{slug(table.singular)}"
        return [ToolCall(tool=name, args={id_param(table): row["id"]})] if name in self.tools else []

    def notify(self, table: TableDef, row: dict[str, Any], what: str) -> tuple[str, list[ToolCall]] | None:
        """Email a contact about the record: the instruction's clause and the calls it takes."""
        if "create_email" not in self.tools or "contacts" not in {t.name for t in self.spec.tables}:
            return None
        contacts = self.spec.table("contacts")
        rows = _rows(self.conn, "SELECT * FROM contacts ORDER BY id")
        contact = self.rng.choice(rows) if rows else None
        caddr = self.address(contacts, contact) if contact else None
        if contact is None or caddr is None:
            return None
        label = row.get(table.label) if table.label else None
        subject = f"{_cap(table.singular)} {label}: {what}" if label else f"{_cap(table.singular)} update: {what}"
        calls = caddr.lookup + [ToolCall(tool="create_email", args={
            "subject": subject, "body": f"Update on the {table.singular}: {what}.", "contact_id": contact["id"]})]
        return f"email {caddr.text.removeprefix('contact ')} about it with the subject \"{subject}\"", calls

    def _transitions(self) -> list[tuple[TableDef, Transition]]:
        return [(t, tr) for t in self.spec.tables if t.workflow for tr in t.workflow.transitions
                if tr.name in self.tools]

    def _rows_in(self, table: TableDef, states: list[str]) -> list[dict[str, Any]]:
        assert table.workflow is not None
        marks = ", ".join("?" * len(states))
        return _rows(self.conn, f"SELECT * FROM {table.name} WHERE {table.workflow.column} IN ({marks}) ORDER BY id",
                     tuple(states))

    def _args(self, tr: Transition, row: dict[str, Any]) -> dict[str, Any]:
        return {p.name: task_value(p, row, self.rng) for p in tr.params}

    def _take(self, pools: list[list[Any]], quota: int) -> list[Any]:
        """Round-robin over shuffled candidate pools, so every source contributes."""
        for pool in pools:
            self.rng.shuffle(pool)
        out: list[Any] = []
        while len(out) < quota and any(pools):
            for pool in pools:
                if pool and len(out) < quota:
                    out.append(pool.pop())
        return out

    # -- families --------------------------------------------------------------------------

    def lookup_act(self, quota: int) -> None:
        pools: list[list[Any]] = []
        for table, tr in self._transitions():
            pool = []
            for row in self._rows_in(table, tr.from_):
                args = self._args(tr, row)
                if guards_hold(tr, row, args, self.rules):
                    pool.append(("transition", table, tr, row, args))
            pools.append(pool)
        for table in self.spec.tables:
            if table.update and f"update_{slug(table.singular)}" in self.tools and table.label:
                rows = _rows(self.conn, f"SELECT * FROM {table.name} ORDER BY id")
                pools.append([("update", table, None, row, None) for row in rows])
        made = 0
        for kind, table, tr, row, args in self._take(pools, quota * 3):
            if made >= quota:
                break
            addr = self.address(table, row)
            if addr is None:
                continue
            if kind == "transition":
                verb = render_verb(tr, addr.text, args)
                call = ToolCall(tool=tr.name, args={id_param(table): row["id"], **args})
                oracle = addr.lookup + self.getter(table, row) + [call]
            else:
                change = self._update_change(table, row)
                if change is None:
                    continue
                verb, extra, call_args = change
                call = ToolCall(tool=f"update_{slug(table.singular)}",
                                args={id_param(table): row["id"], **call_args})
                verb = verb.format(obj=addr.text)
                oracle = addr.lookup + self.getter(table, row) + extra + [call]
            if self.rng.random() < 0.6:
                told = self.notify(table, row, "done")
                if told is not None:
                    verb, oracle = f"{verb}, then {told[0]}", oracle + told[1]
            phrase = self.rng.choice(ACT_PHRASES)
            made += self.add("lookup_act", phrase.format(Verb=_cap(verb), verb=verb), oracle, table.name)

    def _update_change(self, table: TableDef, row: dict[str, Any]) -> tuple[str, list[ToolCall], dict[str, Any]] | None:
        col = table.column(self.rng.choice(table.update))
        if col.enum:
            options = [v for v in col.enum if v != row[col.name]]
            value: Any = self.rng.choice(options)
            return f"change the {col.human} of {{obj}} to {_human(value)}", [], {col.name: value}
        if col.ref:
            target = self.spec.table(col.ref)
            if not (target.label and target.label in target.search):
                return None
            others = _rows(self.conn, f"SELECT * FROM {target.name} WHERE id <> ? ORDER BY id", (row[col.name],))
            other = self.rng.choice(others)
            lookup = ToolCall(tool=f"search_{target.name}", args={target.label: other[target.label]})
            text = f"make {target.singular} {other[target.label]} the {col.human} of {{obj}}"
            return text, [lookup], {col.name: other["id"]}
        if col.type in ("money", "number") and row[col.name] is not None:
            value = round(float(row[col.name]) * self.rng.choice([0.8, 0.9, 1.1, 1.25]), 2)
            said = f"${value:,.2f}" if col.type == "money" else f"{value:g}"
            return f"change the {col.human} of {{obj}} to {said}", [], {col.name: value}
        return None

    def conditional(self, quota: int) -> None:
        pools: list[list[Any]] = []
        by_name = {tr.name: (t, tr) for t, tr in self._transitions()}
        for table, tr in self._transitions():
            if not tr.otherwise or tr.otherwise not in by_name:
                continue
            rule_guards = [g for g in tr.guards if g.rule]
            if not rule_guards:
                continue
            _, alt = by_name[tr.otherwise]
            states = [s for s in tr.from_ if s in alt.from_]
            yes, no = [], []
            for row in self._rows_in(table, states):
                args = self._args(tr, row)
                (yes if guards_hold(tr, row, args, self.rules) else no).append((table, tr, alt, row, args))
            pools += [yes, no]
        made = 0
        for table, tr, alt, row, args in self._take(pools, quota * 3):
            if made >= quota:
                break
            addr = self.address(table, row)
            if addr is None:
                continue
            alt_args = self._args(alt, row)
            says = next(g for g in tr.guards if g.rule).says or "the rule allows it"
            passes = guards_hold(tr, row, args, self.rules)
            rule_name = next(g for g in tr.guards if g.rule).rule
            chosen, chosen_args = (tr, args) if passes else (alt, alt_args)
            text = self.rng.choice(COND_PHRASES).format(
                obj=addr.text, says=says, a=render_verb(tr, "it", args), b=render_verb(alt, "it", alt_args))
            oracle = addr.lookup + self.getter(table, row) + [
                ToolCall(tool="search_business_rules", args={"name": rule_name}),
                ToolCall(tool=chosen.name, args={id_param(table): row["id"], **chosen_args}),
            ]
            told = self.notify(table, row, "decision made")
            if told is not None:
                text, oracle = f"{text.rstrip('.')}. Then {told[0]}.", oracle + told[1]
            made += self.add("conditional", _cap(text), oracle, table.name)

    def bulk(self, quota: int) -> None:
        pools: list[list[Any]] = []
        for table, tr in self._transitions():
            if any(p.task_value and p.task_value.startswith("row.") for p in tr.params):
                continue
            assert table.workflow is not None
            if table.workflow.column not in table.search:
                continue
            for col in self._parent_refs(table):
                pool = []
                for state in tr.from_:
                    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
                    for row in self._rows_in(table, [state]):
                        if row[col.name] is not None:
                            groups[row[col.name]].append(row)
                    for pid, rows in sorted(groups.items()):
                        if 3 <= len(rows) <= BULK_MAX:
                            pool.append((table, tr, col, state, pid, rows))
                pools.append(pool)
        made = 0
        for table, tr, col, state, pid, rows in self._take(pools, quota * 3):
            if made >= quota:
                break
            args = self._args(tr, rows[0])
            if not all(guards_hold(tr, r, args, self.rules) for r in rows):
                continue
            parent_table = self.spec.table(col.ref or "")
            parent = _rows(self.conn, f"SELECT * FROM {parent_table.name} WHERE id = ?", (pid,))[0]
            paddr = self.address(parent_table, parent)
            if paddr is None:
                continue
            assert table.workflow is not None
            link = "of" if col.human == parent_table.singular else f"whose {col.human} is"
            obj = f"every {_human(state)} {table.singular} {link} {paddr.text}"
            verb = render_verb(tr, obj, args)
            search = ToolCall(tool=f"search_{table.name}",
                              args={col.name: pid, table.workflow.column: state, "limit": SEARCH_MAX})
            oracle = paddr.lookup + [search] + [
                ToolCall(tool=tr.name, args={id_param(table): r["id"], **args}) for r in rows
            ]
            made += self.add("bulk", self.rng.choice(BULK_PHRASES).format(Verb=_cap(verb), verb=verb), oracle,
                             table.name)

    def retrieval(self, quota: int) -> None:
        pools: list[list[Any]] = [[], [], [], []]
        for table in self.spec.tables:
            for col in self._parent_refs(table):
                parents = sorted({r[col.name] for r in _rows(self.conn, f"SELECT {col.name} FROM {table.name}")
                                  if r[col.name] is not None})
                for pid in parents:
                    if table.workflow and table.workflow.column in table.search:
                        pools[0].append(("count", table, col, pid))
                    if any(c.type == "money" for c in table.columns):
                        pools[1].append(("sum", table, col, pid))
                    if table.label and table.workflow and table.workflow.column in table.search:
                        pools[2].append(("list", table, col, pid))
            if table.label and table.label in table.search and table.column(table.label).unique:
                for row in _rows(self.conn, f"SELECT * FROM {table.name} ORDER BY id"):
                    pools[3].append(("field", table, None, row))
        made = 0
        for item in self._take(pools, quota * 4):
            if made >= quota:
                break
            made += self._retrieval_task(*item)

    def _retrieval_task(self, kind: str, table: TableDef, col: ColumnDef | None, key: Any) -> bool:
        if kind == "field":
            row = key
            fields = [c for c in table.columns if c.name != table.label and not c.ref and not c.free_text
                      and not c.unique and row[c.name] is not None and c.type != "boolean"]
            if not fields:
                return False
            field = self.rng.choice(fields)
            addr = self.address(table, row)
            if addr is None:
                return False
            kind_of = {"money": "number", "number": "number", "integer": "int"}.get(field.type, "text")
            answer = row[field.name] if kind_of != "text" else _human(row[field.name])
            q = f"What is the {field.human} of {addr.text}?"
            return self.add("retrieval", q, addr.lookup, table.name, answer=answer, answer_type=kind_of)
        assert col is not None and col.ref
        parent_table = self.spec.table(col.ref)
        parent = _rows(self.conn, f"SELECT * FROM {parent_table.name} WHERE id = ?", (key,))[0]
        paddr = self.address(parent_table, parent)
        if paddr is None:
            return False
        rows = _rows(self.conn, f"SELECT * FROM {table.name} WHERE {col.name} = ? ORDER BY id", (key,))
        plural = table.plural_name.replace("_", " ")
        if kind == "count":
            assert table.workflow is not None
            wf = table.workflow.column
            state = self.rng.choice(sorted({r[wf] for r in rows}))
            n = sum(1 for r in rows if r[wf] == state)
            q = f"How many {_human(state)} {plural} does {paddr.text} have?"
            search = ToolCall(tool=f"search_{table.name}", args={col.name: key, wf: state, "limit": 1})
            return self.add("retrieval", q, paddr.lookup + [search], table.name, answer=n, answer_type="int")
        if kind == "sum":
            money = self.rng.choice([c for c in table.columns if c.type == "money"])
            total = round(sum(float(r[money.name] or 0) for r in rows), 2)
            q = f"What is the total {money.human} across all {plural} of {paddr.text}?"
            search = ToolCall(tool=f"search_{table.name}", args={col.name: key, "limit": SEARCH_MAX})
            return self.add("retrieval", q, paddr.lookup + [search], table.name, answer=total, answer_type="number")
        assert table.workflow is not None and table.label
        wf = table.workflow.column
        state = self.rng.choice(sorted({r[wf] for r in rows}))
        names = [str(r[table.label]) for r in rows if r[wf] == state]
        label_h = table.column(table.label).human
        q = f"List the {label_h} of every {_human(state)} {table.singular} of {paddr.text}."
        search = ToolCall(tool=f"search_{table.name}", args={col.name: key, wf: state, "limit": SEARCH_MAX})
        return self.add("retrieval", q, paddr.lookup + [search], table.name, answer=names, answer_type="list")


def generate_tasks(spec: WorldSpec, tool_names: set[str], seed_image: bytes,
                   validate: Callable[[Task], bool] | None = None) -> list[Task]:
    """All tasks of a world, deterministic for its seed."""
    from worldfactory.build import task_compound

    builder = TaskBuilder(spec, tool_names, seed_image, validate)
    try:
        builder.lookup_act(FAMILY_QUOTAS["lookup_act"])
        builder.conditional(FAMILY_QUOTAS["conditional"])
        builder.bulk(FAMILY_QUOTAS["bulk"])
        task_compound.sweep(builder, FAMILY_QUOTAS["sweep"])
        task_compound.year_end(builder)
        task_compound.workflow(builder, FAMILY_QUOTAS["workflow"])
        builder.retrieval(FAMILY_QUOTAS["retrieval"])
        task_compound.decline(builder, FAMILY_QUOTAS["decline"])
    finally:
        builder.conn.close()
    return builder.tasks

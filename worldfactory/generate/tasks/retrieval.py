"""retrieval: answer a question exactly: how many records of a parent are in a state, the total of a
money column across them (the highest, for a price of one unit, whose total means nothing), the list of
their labels, or one field of a named record."""

from __future__ import annotations

from typing import Any

from worldfactory.spec import ToolCall, has_name

from .builder import SEARCH_MAX, TaskBuilder
from .driver import Plan, Pools
from .words import human, in_state, of_parent

FAMILY = "retrieval"
QUOTA = 20
TRIES = 4
ANSWER_TYPES = {"money": "number", "number": "number", "integer": "int", "date": "date"}  # else "text"
ASK = {"number": " Give the amount as a number.", "int": " Answer with a number.",  # the kind of answer wanted
       "date": " Give the date (YYYY-MM-DD).", "text": ""}


PER_UNIT = {"rate", "per", "unit"}  # words of a money column that prices one unit ("unit price", "nightly rate")


def _summable(col: Any) -> bool:
    """A money column whose total means something: an amount, not a price of one unit ("the total unit price
    across the order items" adds prices of different items, and "the total rate across the time entries"
    left a careful agent guessing hours x rate), nor one its pack marks `additive: false` (a deductible)."""
    return col.type == "money" and col.additive and not PER_UNIT & set(col.human.split())


def _money(col: Any) -> bool:
    """A money column a question can ask about: its total where it adds up, else its highest value."""
    return col.type == "money"


def candidates(b: TaskBuilder) -> Pools:
    """Four pools: counts, sums (or highest prices) and lists over each parent's records, and fields of named
    records."""
    counts: list[Any] = []
    sums: list[Any] = []
    lists: list[Any] = []
    fields: list[Any] = []
    for table in b.spec.tables:
        for col in b.parent_refs(table):
            for pid in b.parent_ids(table, col):
                if table.workflow and table.workflow.column in table.search:
                    counts.append(("count", table, col, pid))
                if any(_money(c) for c in table.columns):
                    sums.append(("sum", table, col, pid))
                if table.label and table.workflow and table.workflow.column in table.search:
                    lists.append(("list", table, col, pid))
        if has_name(table):
            for row in b.rows(table):
                fields.append(("field", table, None, row))
    return Pools([counts, sums, lists, fields])


def plan(b: TaskBuilder, candidate: tuple[Any, ...]) -> Plan | None:
    kind, table, col, key = candidate
    if kind == "field":
        row = key
        fields = [c for c in table.columns if c.name != table.label and not c.ref and not c.free_text
                  and not c.unique and row[c.name] is not None and c.type != "boolean"]
        if not fields:
            return None
        field = b.rng.choice(fields)
        addr = b.address(table, row)
        if addr is None:
            return None
        kind_of = ANSWER_TYPES.get(field.type, "text")
        answer = row[field.name] if kind_of != "text" else human(row[field.name])
        ask = " Give the amount in dollars." if field.type == "money" else ASK[kind_of]
        q = f"What is the {field.human} of {addr.text}?{ask}"
        return Plan(q, addr.lookup, table.name, answer=answer, answer_type=kind_of)
    assert col is not None and col.ref
    parent_table = b.spec.table(col.ref)
    parent = b.row(parent_table, key)
    assert parent is not None
    paddr = b.address(parent_table, parent, plain=True)
    if paddr is None:
        return None
    of = of_parent(col, parent_table, paddr.text)
    own = of.startswith("of ")
    rows = b.children(table, col, key)
    plural = table.plural_name.replace("_", " ")
    if kind == "count":
        assert table.workflow is not None
        wf = table.workflow.column
        state = b.rng.choice(sorted({r[wf] for r in rows}))
        n = sum(1 for r in rows if r[wf] == state)
        q = (f"How many {in_state(plural, state)} does {paddr.text} have?" if own  # not "have record claim X"
             else f"How many {in_state(plural, state)} are there {of}?") + ASK["int"]
        search = ToolCall(tool=f"search_{table.name}", args={col.name: key, wf: state, "limit": 1})
        return Plan(q, paddr.lookup + [search], table.name, answer=n, answer_type="int")
    if kind == "sum":
        money = b.rng.choice([c for c in table.columns if _money(c)])
        search = ToolCall(tool=f"search_{table.name}", args={col.name: key, "limit": SEARCH_MAX})
        if not _summable(money):  # a price of one unit: its highest, never its sum
            values = [float(r[money.name]) for r in rows if r[money.name] is not None]
            if not values:
                return None
            q = f"What is the highest {money.human} among the {plural} {of}? Give the amount in dollars."
            return Plan(q, paddr.lookup + [search], table.name, answer=round(max(values), 2), answer_type="number")
        total = round(sum(float(r[money.name] or 0) for r in rows), 2)
        q = (f"What is the combined {money.human} of the {plural} {of}?" if "total" in money.human.split()
             else f"What is the total {money.human} across the {plural} {of}?") + " Give the total in dollars."
        return Plan(q, paddr.lookup + [search], table.name, answer=total, answer_type="number")
    assert table.workflow is not None and table.label
    wf = table.workflow.column
    state = b.rng.choice(sorted({r[wf] for r in rows}))
    names = [str(r[table.label]) for r in rows if r[wf] == state]
    label_h = table.column(table.label).human
    q = f"List the {label_h} of every {in_state(table.singular, state)} {of}, in any order."
    search = ToolCall(tool=f"search_{table.name}", args={col.name: key, wf: state, "limit": SEARCH_MAX})
    return Plan(q, paddr.lookup + [search], table.name, answer=names, answer_type="list")

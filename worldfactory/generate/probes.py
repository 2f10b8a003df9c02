"""Probe calls for every tool: one valid call and several invalid ones with the error they must give.

The tools stage runs them in the sandbox before it accepts tools.py; the test suite runs them
again over MCP. Invalid probes cover unknown and missing arguments, wrong types, records that do
not exist (the record acted on, and the one a ref parameter names), wrong workflow states, broken
business rules and duplicate unique values.
"""

from __future__ import annotations

import random
from typing import Any

from worldfactory.generate.data import open_image
from worldfactory.generate.rows import fetch_dicts as _rows
from worldfactory.generate.tools import ParamSpec, ToolSpec
from worldfactory.generate.workflow import guard_holds, guards_hold, id_param, task_value, with_related
from worldfactory.seeds import stage_rng
from worldfactory.spec import TableDef, Transition, WorldSpec

MISSING_ID = 999999



def _clamp(value: float, p: ParamSpec) -> float:
    if p.minimum is not None:
        value = max(value, p.minimum)
    if p.maximum is not None:
        value = min(value, p.maximum)
    return value


def _valid_value(p: ParamSpec, table: str, conn: Any, clock: str) -> Any:
    if p.ref:
        return conn.execute(f"SELECT min(id) FROM {p.ref}").fetchone()[0]
    if p.enum:
        return p.enum[0]
    if p.type == "date":
        return clock
    if p.type == "boolean":
        return True
    if p.type == "integer":
        return int(_clamp(30, p))
    if p.type in ("money", "number"):
        return _clamp(12.5, p)
    return f"Probe {table} {p.name}"


def _transition_args(tr: Transition, row: dict[str, Any], rng: random.Random, conn: Any) -> dict[str, Any]:
    """The arguments a probe passes: the task's values, and for a parameter that refers to another table
    the first id of a row that exists in the seed."""
    return {p.name: conn.execute(f"SELECT min(id) FROM {p.ref}").fetchone()[0]
            if p.ref and (p.task_value or "choice") == "choice" else task_value(p, row, rng) for p in tr.params}


def _promises(spec: WorldSpec, table: TableDef, valid: dict[str, Any], conn: Any) -> list[dict[str, Any]]:
    """Make a create's valid call keep its column promises, and probe that each is enforced: a reference
    limited to some states (a retired resource is never booked) and a column filled from the record a
    reference names (an email's address is the contact's own). Changes `valid` in place."""
    invalid: list[dict[str, Any]] = []
    for name in list(valid):
        col = table.column(name)
        if col.ref and col.ref_states:
            target = spec.table(col.ref)
            assert target.workflow is not None
            marks = ", ".join("?" * len(col.ref_states))
            where = f"FROM {col.ref} WHERE {target.workflow.column}"
            valid[name] = conn.execute(f"SELECT min(id) {where} IN ({marks})", col.ref_states).fetchone()[0]
            barred = conn.execute(f"SELECT min(id) {where} NOT IN ({marks})", col.ref_states).fetchone()[0]
            if barred is not None:
                invalid.append({"args": {**valid, name: barred}, "expect": "this action needs"})
    for name in list(valid):
        col = table.column(name)
        ref_name, _, source = (col.fills_from or "").partition(".")
        if col.fills_from and valid.get(ref_name) is not None:
            ref = table.column(ref_name).ref
            own = conn.execute(f"SELECT {source} FROM {ref} WHERE id = ?", (valid[ref_name],)).fetchone()[0]
            if own is not None:
                invalid.append({"args": {**valid, name: f"not-{own}"}, "expect": "must be the"})
                valid[name] = own
    return invalid


def probes_for(spec: WorldSpec, tools: list[ToolSpec], seed_image: bytes) -> dict[str, dict[str, Any]]:
    conn = open_image(seed_image)
    rng = stage_rng(spec.brief.generation_seed, "probes")
    rules = spec.brief.rules
    out: dict[str, dict[str, Any]] = {}
    first_rows: dict[str, list[dict[str, Any]]] = {}  # read once per table (several tools each), never changed
    try:
        for tool in tools:
            table = spec.table(tool.table)
            rows = first_rows.get(table.name)
            if rows is None:
                rows = first_rows[table.name] = with_related(conn, {t.name: t for t in spec.tables}, table, _rows(
                    conn, f"SELECT * FROM {table.name} ORDER BY id LIMIT 400"))
            valid: dict[str, Any] | None = None
            invalid: list[dict[str, Any]] = []
            if tool.kind == "search":
                label = table.label if table.label in table.search else None
                valid = {label: rows[0][label]} if (label and rows) else {"limit": 5}
            elif tool.kind == "get":
                valid = {id_param(table): rows[0]["id"]} if rows else None
            elif tool.kind == "create":
                valid = {p.name: _valid_value(p, table.name, conn, spec.brief.clock) for p in tool.params}
                invalid += _promises(spec, table, valid, conn)
                for p in tool.params:
                    col = table.column(p.name)
                    if col.unique and rows:
                        invalid.append({"args": {**valid, p.name: rows[0][p.name]}, "expect": "must be unique"})
                        break
                for p in tool.params:
                    if p.ref:
                        noun = spec.table(p.ref).singular
                        invalid.append({"args": {**valid, p.name: MISSING_ID},
                                        "expect": f"no {noun} with id {MISSING_ID}"})
                        break
            elif tool.kind == "update":
                field = tool.params[1]
                if rows:
                    valid = {id_param(table): rows[0]["id"],
                             field.name: _valid_value(field, table.name, conn, spec.brief.clock)}
                invalid.append({"args": {id_param(table): rows[0]["id"] if rows else 1},
                                "expect": "nothing to change"})
            else:
                assert table.workflow is not None
                tr = next(x for x in table.workflow.transitions if x.name == tool.transition)
                wf = table.workflow.column
                for row in rows:
                    args = _transition_args(tr, row, rng, conn)
                    if row[wf] in tr.from_ and guards_hold(tr, row, args, rules, spec.brief.clock):
                        valid = {id_param(table): row["id"], **args}
                        break
                wrong = next((r for r in rows if r[wf] not in tr.from_), None)
                if wrong is not None:
                    args = _transition_args(tr, wrong, rng, conn)
                    invalid.append({"args": {id_param(table): wrong["id"], **args}, "expect": "this action needs"})
                for p in [p for p in tr.params if p.ref][:1] if valid else []:  # a record that does not exist
                    noun = spec.table(p.ref or "").singular
                    invalid.append({"args": {**valid, p.name: MISSING_ID}, "expect": f"no {noun} with id {MISSING_ID}"})
                for g in [g for g in tr.guards if g.rule]:
                    for row in rows:
                        args = _transition_args(tr, row, rng, conn)
                        if row[wf] in tr.from_ and not guard_holds(g, row, args, rules, spec.brief.clock):
                            invalid.append({"args": {id_param(table): row["id"], **args},
                                            "expect": g.message.split(";")[0]})
                            break
            base = dict(valid) if valid else {}
            invalid.append({"args": {**base, "unexpected_field": 1}, "expect": "'unexpected_field' was unexpected"})
            required = [p for p in tool.params if p.required]
            if required:
                gone = {k: v for k, v in base.items() if k != required[0].name}
                invalid.append({"args": gone, "expect": f"'{required[0].name}' is a required property"})
                wrong_type: Any = "not-a-number" if required[0].type in ("integer", "number", "money") else 12345
                if required[0].type == "boolean":
                    wrong_type = "yes"
                invalid.append({"args": {**base, required[0].name: wrong_type}, "expect": required[0].name})
            else:
                invalid.append({"args": {**base, "limit": "many"}, "expect": "limit"})
            if tool.kind in ("get", "update") or (tool.kind == "transition" and (valid or len(tool.params) == 1)):
                args = {**base, id_param(table): MISSING_ID}
                if tool.kind == "update" and len(args) < 2:
                    args[tool.params[1].name] = _valid_value(tool.params[1], table.name, conn, spec.brief.clock)
                invalid.append({"args": args, "expect": f"no {table.singular} with id {MISSING_ID}"})
            out[tool.name] = {"valid": valid, "invalid": invalid}
    finally:
        conn.close()
    return out

"""State diffs against the seed, normalised the way verifiers declare.

A diff lists, per changed table, updated rows (by primary key), deleted keys and inserted rows.
Inserted rows have no stable key (the agent may create them in another order), so they are
compared as a multiset with their surrogate keys replaced; references to rows created during the
episode become "<new>", and free-text fields that only need to exist become "<text>".
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any

from pydantic import BaseModel

NEW = "<new>"
TEXT = "<text>"


class TableNorm(BaseModel):
    columns: list[str]
    refs: dict[str, str] = {}
    poly: dict[str, str] = {}  # column -> column that names the referenced table
    free_text: list[str] = []
    seed_max_id: int = 0


class Mismatch(BaseModel):
    table: str
    key: str
    column: str
    expected: Any
    got: Any


def _norm_value(norm: dict[str, TableNorm], t: TableNorm, row: dict[str, Any], col: str) -> Any:
    value = row[col]
    if value is None:
        return None
    if col in t.free_text:
        return TEXT if str(value).strip() else ""
    target = t.refs.get(col)
    if target is None and col in t.poly:
        target = row.get(t.poly[col])
    if target is not None and target in norm and isinstance(value, int) and value > norm[target].seed_max_id:
        return NEW
    if isinstance(value, float):
        return round(value, 2)
    return value


def table_diff(conn: sqlite3.Connection, norm: dict[str, TableNorm], table: str) -> dict[str, Any] | None:
    """Normalised changes of one table between main and the attached `seed` schema."""
    t = norm[table]
    cols = ["id", *t.columns]
    sel = ", ".join(cols)
    added = conn.execute(f"SELECT {sel} FROM main.{table} EXCEPT SELECT {sel} FROM seed.{table}").fetchall()
    removed = conn.execute(f"SELECT {sel} FROM seed.{table} EXCEPT SELECT {sel} FROM main.{table}").fetchall()
    if not added and not removed:
        return None
    old = {r[0]: dict(zip(cols, r, strict=True)) for r in removed}
    updated: dict[str, dict[str, Any]] = {}
    inserted: list[dict[str, Any]] = []
    for r in added:
        row = dict(zip(cols, r, strict=True))
        before = old.pop(row["id"], None)
        if before is None:
            inserted.append({c: _norm_value(norm, t, row, c) for c in t.columns})
            continue
        changes = {c: _norm_value(norm, t, row, c) for c in t.columns if row[c] != before[c]}
        if changes:
            updated[str(row["id"])] = changes
    inserted.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
    out: dict[str, Any] = {}
    if updated:
        out["updated"] = dict(sorted(updated.items(), key=lambda kv: int(kv[0])))
    if old:
        out["deleted"] = sorted(old)
    if inserted:
        out["inserted"] = inserted
    return out or None


def state_diff(conn: sqlite3.Connection, norm: dict[str, TableNorm], tables: list[str]) -> dict[str, Any]:
    """Diff of the given tables (a superset of the changed ones) against `seed`."""
    out: dict[str, Any] = {}
    for table in sorted(tables):
        d = table_diff(conn, norm, table)
        if d:
            out[table] = d
    return out


def digest(diff: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(diff, sort_keys=True, default=str).encode()).hexdigest()


def compare(gold: dict[str, Any], got: dict[str, Any]) -> list[Mismatch]:
    """Every difference between the gold diff and the agent's diff, for diagnosis."""
    out: list[Mismatch] = []
    for table in sorted(set(gold) | set(got)):
        g, a = gold.get(table, {}), got.get(table, {})
        gu, au = g.get("updated", {}), a.get("updated", {})
        for key in sorted(set(gu) | set(au), key=int):
            gc, ac = gu.get(key, {}), au.get(key, {})
            for col in sorted(set(gc) | set(ac)):
                ev, av = gc.get(col, "<unchanged>"), ac.get(col, "<unchanged>")
                if ev != av:
                    out.append(Mismatch(table=table, key=key, column=col, expected=ev, got=av))
        gd, ad = set(g.get("deleted", [])), set(a.get("deleted", []))
        for key in sorted(gd ^ ad):
            out.append(Mismatch(table=table, key=str(key), column="*", expected="deleted" if key in gd else "kept",
                                got="deleted" if key in ad else "kept"))
        gi = [json.dumps(r, sort_keys=True, default=str) for r in g.get("inserted", [])]
        ai = [json.dumps(r, sort_keys=True, default=str) for r in a.get("inserted", [])]
        for row in gi:
            if row in ai:
                ai.remove(row)
            else:
                out.append(Mismatch(table=table, key="<new>", column="*", expected=json.loads(row), got=None))
        for row in ai:
            out.append(Mismatch(table=table, key="<new>", column="*", expected=None, got=json.loads(row)))
    return out

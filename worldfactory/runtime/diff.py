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
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

NEW = "<new>"
TEXT = "<text>"
CHANGES_TABLE = "_wf_changes"  # (table, id) of every row an episode inserted, updated or deleted


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


def changelog_ddl(tables: list[str]) -> str:
    """The change log and the triggers that fill it, for every world table (harness use only)."""
    parts = [f"CREATE TABLE {CHANGES_TABLE} (tbl TEXT NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (tbl, id)) "
             f"WITHOUT ROWID;"]
    for t in tables:
        log = f"INSERT OR IGNORE INTO {CHANGES_TABLE} VALUES ('{t}', %s);"
        parts.append(f"CREATE TRIGGER _wf_ins_{t} AFTER INSERT ON {t} BEGIN {log % 'new.id'} END;")
        parts.append(f"CREATE TRIGGER _wf_upd_{t} AFTER UPDATE ON {t} BEGIN {log % 'old.id'} {log % 'new.id'} END;")
        parts.append(f"CREATE TRIGGER _wf_del_{t} AFTER DELETE ON {t} BEGIN {log % 'old.id'} END;")
    return "\n".join(parts)


Normalizer = Callable[[tuple[Any, ...]], dict[str, Any]]


def row_normalizer(norm: dict[str, TableNorm], table: str) -> Normalizer:
    """A function from a row (id first, then the columns) to its normalised columns, as _norm_value gives.

    The per-column decision is made once per table, not once per value: a 1,000-call task
    changes thousands of rows, and the verifier normalises every one.
    """
    t = norm[table]
    free, refs, poly = set(t.free_text), t.refs, t.poly
    plan: list[tuple[str, int, int, Any]] = []  # (column, index in row, kind, detail)
    for i, c in enumerate(t.columns, start=1):
        if c in free:
            plan.append((c, i, 1, None))
        elif c in refs:
            target = refs[c]
            plan.append((c, i, 2, norm[target].seed_max_id) if target in norm else (c, i, 0, None))
        elif c in poly:
            plan.append((c, i, 3, t.columns.index(poly[c]) + 1))
        else:
            plan.append((c, i, 0, None))

    def normalize(row: tuple[Any, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for c, i, kind, detail in plan:
            v = row[i]
            if v is None:
                out[c] = None
                continue
            if kind == 1:
                out[c] = TEXT if str(v).strip() else ""
                continue
            if kind == 3:
                target = row[detail]
                detail = norm[target].seed_max_id if target in norm else None
                kind = 2 if detail is not None else 0
            if kind == 2 and isinstance(v, int) and v > detail:
                out[c] = NEW
            else:
                out[c] = round(v, 2) if isinstance(v, float) else v
        return out

    return normalize


def _rows_diff(normalize: Normalizer, columns: list[str], ids: list[int], now: dict[int, tuple[Any, ...]],
               seed: dict[int, tuple[Any, ...]]) -> dict[str, Any] | None:
    """The normalised diff of one table, given the rows that may have changed, now and in the seed.

    Inserted rows stay in the log's order; `canonical` sorts them."""
    updated: dict[str, dict[str, Any]] = {}
    inserted: list[dict[str, Any]] = []
    deleted: list[int] = []
    for key in ids:
        row, before = now.get(key), seed.get(key)
        if row == before:
            continue
        if row is None:
            deleted.append(key)
        elif before is None:
            inserted.append(normalize(row))
        else:
            changed = {c for c, a, b in zip(columns, row[1:], before[1:], strict=True) if a != b}
            updated[str(key)] = {c: v for c, v in normalize(row).items() if c in changed}
    out: dict[str, Any] = {}
    if updated:
        out["updated"] = updated
    if deleted:
        out["deleted"] = deleted
    if inserted:
        out["inserted"] = inserted
    return out or None


class ChangeDiffer:
    """Diffs an episode against the seed from its change log; one per world, shared by its episodes."""

    def __init__(self, norm: dict[str, TableNorm], seed_rows: Callable[[str], dict[int, tuple[Any, ...]]]) -> None:
        self.norm = norm
        self.seed_rows = seed_rows
        self._normalizers: dict[str, Normalizer] = {}
        self._select = {table: f"SELECT {', '.join(['id', *t.columns])} FROM main.{table} WHERE id IN "
                               f"(SELECT id FROM {CHANGES_TABLE} WHERE tbl = ?)" for table, t in norm.items()}

    def normalizer(self, table: str) -> Normalizer:
        fn = self._normalizers.get(table)
        if fn is None:
            fn = self._normalizers[table] = row_normalizer(self.norm, table)
        return fn

    def diff(self, conn: sqlite3.Connection, sort_inserted: bool = True) -> dict[str, Any]:
        """Exactly what state_diff gives over every table, at a cost that follows the changed rows.

        With sort_inserted=False inserted rows keep the log's order (compare them as a multiset, see
        same_diff); otherwise they are sorted as stored verifiers have them (see canonical).
        """
        out: dict[str, Any] = {}
        for table, ids, now in self._changed(conn):
            d = _rows_diff(self.normalizer(table), self.norm[table].columns, ids, now, self.seed_rows(table))
            if d:
                out[table] = d
        return canonical(out) if sort_inserted else out

    def _changed(self, conn: sqlite3.Connection) -> Iterator[tuple[str, list[int], dict[int, tuple[Any, ...]]]]:
        """Each world table the change log names, in name order: its logged ids and those rows as they are now."""
        logged: dict[str, list[int]] = {}
        for table, key in conn.execute(f"SELECT tbl, id FROM {CHANGES_TABLE} ORDER BY tbl, id"):
            logged.setdefault(table, []).append(key)
        for table, ids in logged.items():
            if table in self.norm:
                yield table, ids, {r[0]: r for r in conn.execute(self._select[table], (table,))}

    def matches(self, conn: sqlite3.Connection, gold: dict[str, Any], gold_bags: dict[str, Counter[Any]]) -> bool:
        """same_diff(gold, self.diff(conn, False), gold_bags), stopping at the first table that differs.

        A failed episode (most rollouts of a long task) usually differs in its first table; its
        other changed rows are never normalised. A table whose count of inserted rows differs from
        gold's is rejected before any of its rows are normalised.
        """
        seen = 0
        for table, ids, now in self._changed(conn):
            seed = self.seed_rows(table)
            g = gold.get(table)
            if sum(1 for key in ids if key in now and key not in seed) != (len(g.get("inserted", ())) if g else 0):
                return False
            d = _rows_diff(self.normalizer(table), self.norm[table].columns, ids, now, seed)
            if d is None:
                if g is not None:
                    return False
                continue
            if g is None or not _same_table(g, d, gold_bags.get(table)):
                return False
            seen += 1
        return seen == len(gold)


def _bag(rows: list[dict[str, Any]]) -> Counter[frozenset[tuple[str, Any]]]:
    return Counter(frozenset(r.items()) for r in rows)


def same_diff(gold: dict[str, Any], got: dict[str, Any], gold_bags: dict[str, Counter[Any]] | None = None) -> bool:
    """Whether two diffs are equal, inserted rows compared as multisets (either side may be unsorted)."""
    if gold.keys() != got.keys():
        return False
    return all(_same_table(g, got[table], gold_bags.get(table) if gold_bags is not None else None)
               for table, g in gold.items())


def _same_table(g: dict[str, Any], a: dict[str, Any], bag: Counter[Any] | None) -> bool:
    """One table's part of same_diff: `bag` is gold's inserted rows as a multiset, if already made."""
    if g.keys() != a.keys() or g.get("updated") != a.get("updated") or g.get("deleted") != a.get("deleted"):
        return False
    if "inserted" in g:
        if len(g["inserted"]) != len(a["inserted"]):
            return False
        if (bag if bag is not None else _bag(g["inserted"])) != _bag(a["inserted"]):
            return False
    return True


def inserted_bags(diff: dict[str, Any]) -> dict[str, Counter[Any]]:
    """The inserted rows of a diff as multisets, per table: a gold diff's, computed once per task."""
    return {table: _bag(d["inserted"]) for table, d in diff.items() if "inserted" in d}


def _row_key(row: dict[str, Any]) -> str:
    """The order of inserted rows in a stored diff: by their JSON."""
    return json.dumps(row, sort_keys=True, default=str)


def canonical(diff: dict[str, Any]) -> dict[str, Any]:
    """The diff with inserted rows in their stored order (sorted by their JSON)."""
    for d in diff.values():
        if "inserted" in d:
            d["inserted"].sort(key=_row_key)
    return diff


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
    inserted.sort(key=_row_key)
    out: dict[str, Any] = {}
    if updated:
        out["updated"] = dict(sorted(updated.items(), key=lambda kv: int(kv[0])))
    if old:
        out["deleted"] = sorted(old)
    if inserted:
        out["inserted"] = inserted
    return out or None


def state_diff(conn: sqlite3.Connection, norm: dict[str, TableNorm], tables: list[str]) -> dict[str, Any]:
    """Diff of the given tables (a superset of the changed ones) against an attached `seed`, table by table.

    The slow reference for changes_diff: whole tables compared with EXCEPT, no change log.
    """
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
        left = _bag(a.get("inserted", []))  # rows as multisets: either side may be unsorted
        for row in g.get("inserted", []):
            key = frozenset(row.items())
            if left[key] > 0:
                left[key] -= 1
            else:
                out.append(Mismatch(table=table, key="<new>", column="*", expected=row, got=None))
        for row in a.get("inserted", []):
            key = frozenset(row.items())
            if left[key] > 0:
                left[key] -= 1
                out.append(Mismatch(table=table, key="<new>", column="*", expected=None, got=row))
    return out

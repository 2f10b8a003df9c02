"""Near-duplicate records seeded on purpose, so that finding the right record takes search and judgement.

Real company data has near-duplicates: two accounts named alike in different cities, two claims of one
policy filed days apart, a customer contact who shares a colleague's name. Three kinds, ``brief.twins``
pairs of each (0 turns them off; variants draw 0 to 3):

- ``dated``: a copy of a workflow record under the same parent, with its own code and its dates some days
  later (the search by parent finds both; only the date tells them apart);
- ``named``: a record of a table named by a person's or company's name, copied under a name that contains
  the original's (Tomas Dahl and Tomas Dahl-Ward) in another city;
- ``same_name``: a customer contact with the full name of a staff user.

Twins are appended after the generated rows (ids past ``table_rows``), so every generated row keeps its id
and values. A twin that would break a declared invariant or the realism audit is not kept. ``find_twins``
reads the pairs back from a seed database, so the task stage needs nothing but the seed.
"""

from __future__ import annotations

import random
import re
import sqlite3
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from worldfactory.audit import audit_db
from worldfactory.fill import numbered
from worldfactory.row_bounds import table_rows
from worldfactory.seeds import stage_rng
from worldfactory.spec import TableDef, Vocabulary, WorldSpec

from .rows import fetch_dicts

MAX_TABLES = 2  # tables of one kind that get twins
SHIFT_DAYS = (2, 9)  # how many days later a dated twin is
COMPANY_TAILS = ("Group", "Holdings", "Partners")  # what a second company named alike adds to the name


@dataclass(frozen=True)
class Twin:
    """A seeded near-duplicate: ``twin`` (the new row) of ``source`` in ``table``; for ``same_name``,
    ``table`` is contacts and ``source`` a row of users."""

    kind: str
    table: str
    source: int
    twin: int


def _code_gen(table: TableDef) -> str | None:
    col = table.column(table.label) if table.label else None
    gen = col.gen if col is not None else None
    return gen["code"] if isinstance(gen, dict) and "code" in gen else None


def _named_gen(table: TableDef) -> str | None:
    col = table.column(table.label) if table.label else None
    return col.gen if col is not None and col.gen in ("person_name", "company_name", "company") else None


def _city_column(table: TableDef) -> str | None:
    return next((c.name for c in table.columns if c.gen == "city"), None)


def dated_tables(spec: WorldSpec) -> list[tuple[TableDef, str, str]]:
    """Tables whose records a person names by parent and date: (table, parent column, date column); the
    anchor first, then spec order."""
    out = []
    for t in sorted(spec.tables, key=lambda t: t.name != spec.anchor):
        if t.rows is None or not t.workflow or not _code_gen(t) or t.fill:
            continue
        parent = next((c.name for c in t.columns if c.ref and c.name in t.search and c.ref != t.name
                       and spec.has_table(c.ref) and spec.table(c.ref).label), None)
        day = next((c.name for c in t.columns if c.type == "date" and c.name in t.search), None)
        uniques = [c.name for c in t.columns if c.unique and c.name != t.label]
        if parent and day and not uniques:
            out.append((t, parent, day))
    return out[:MAX_TABLES]


def named_tables(spec: WorldSpec) -> list[TableDef]:
    """Tables of people or companies by name with a city: where two alike names in two cities confuse."""
    out = [t for t in spec.tables if t.rows is not None and not t.fill and _named_gen(t) and _city_column(t)
           and t.label in t.search]
    return out[:MAX_TABLES]


def _insert(conn: sqlite3.Connection, table: TableDef, row: dict[str, Any]) -> None:
    cols = ["id"] + [c.name for c in table.columns]
    conn.execute(f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                 [row[c] for c in cols])


def _next_id(conn: sqlite3.Connection, table: TableDef) -> int:
    return int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table.name}").fetchone()[0]) + 1


def _invariants_hold(spec: WorldSpec, conn: sqlite3.Connection) -> bool:
    for inv in spec.invariants:
        try:
            found = conn.execute(inv.sql).fetchone()
        except sqlite3.Error:
            return False
        if found and found[0]:
            return False
    return True


def _shifted(table: TableDef, row: dict[str, Any], day: str, days: int, clock: date) -> dict[str, Any] | None:
    """The row with its date ``day`` and every later date of it moved ``days`` on; None if one passes the clock."""
    start = row[day]
    out = dict(row)
    for c in table.columns:
        value = row[c.name]
        if c.type != "date" or value is None or value < start:
            continue
        moved = date.fromisoformat(value) + timedelta(days=days)
        if date.fromisoformat(value) <= clock < moved:
            return None
        out[c.name] = moved.isoformat()
    return out


def _dated(spec: WorldSpec, conn: sqlite3.Connection, rng: random.Random, count: int) -> None:
    clock = date.fromisoformat(spec.brief.clock)
    for table, parent, day in dated_tables(spec):
        assert table.workflow is not None and table.label is not None
        movable = sorted({s for tr in table.workflow.transitions for s in tr.from_})
        rows = [r for r in fetch_dicts(conn, f"SELECT * FROM {table.name} ORDER BY id")
                if r[table.workflow.column] in movable and r[parent] is not None and r[day]]
        rng.shuffle(rows)
        if table.name == spec.anchor and spec.has_table("notes"):  # a record with a note first: a note can name it
            noted = {r[0] for r in conn.execute("SELECT DISTINCT subject_id FROM notes")}
            rows.sort(key=lambda r: r["id"] not in noted)
        made = 0
        for row in rows:
            if made >= count:
                break
            twin = _shifted(table, row, day, rng.randint(*SHIFT_DAYS), clock)
            if twin is None:
                continue
            twin["id"] = _next_id(conn, table)
            twin[table.label] = numbered(_code_gen(table) or "", twin["id"])
            made += _keep(spec, conn, table, twin)


def _named(spec: WorldSpec, vocab: Vocabulary, conn: sqlite3.Connection, rng: random.Random, count: int) -> None:
    for table in named_tables(spec):
        assert table.label is not None
        city = _city_column(table) or ""
        rows = fetch_dicts(conn, f"SELECT * FROM {table.name} ORDER BY id")
        rng.shuffle(rows)
        made = 0
        for row in rows:
            if made >= count:
                break
            name = str(row[table.label])
            tails = [t for t in COMPANY_TAILS if t not in name.split()]  # never "Harbor Holdings Holdings"
            if not tails:
                continue
            alike = (f"{name}-{rng.choice(vocab.last_names)}" if _named_gen(table) == "person_name"
                     else f"{name} {rng.choice(tails)}")
            cities = [c for c in vocab.cities if c != row[city]]
            taken = conn.execute(f"SELECT 1 FROM {table.name} WHERE {table.label} LIKE ?", (f"{name}%",)).fetchall()
            if len(taken) > 1 or not cities:
                continue  # a name already shared by another record: not a clean pair
            twin = {**row, "id": _next_id(conn, table), table.label: alike, city: rng.choice(cities)}
            if not _fresh_uniques(conn, table, twin, name, alike):
                continue
            made += _keep(spec, conn, table, twin)


def _fresh_uniques(conn: sqlite3.Connection, table: TableDef, twin: dict[str, Any], name: str, alike: str) -> bool:
    """Give the twin's other unique columns values of their own (an email made from its own name); False when
    one cannot be."""
    for c in table.columns:
        if not c.unique or c.name == table.label:
            continue
        if isinstance(c.gen, dict) and "email_from" in c.gen and isinstance(twin[c.name], str):
            local = re.sub(r"[^a-z]+", ".", alike.lower()).strip(".")
            twin[c.name] = f"{local}@{twin[c.name].split('@', 1)[-1]}"
        else:
            return False
        if conn.execute(f"SELECT 1 FROM {table.name} WHERE {c.name} = ?", (twin[c.name],)).fetchone():
            return False
    return True


def _same_name(spec: WorldSpec, conn: sqlite3.Connection, rng: random.Random, count: int) -> None:
    if not (spec.has_table("contacts") and spec.has_table("users")):
        return
    contacts = spec.table("contacts")
    if contacts.rows is None or contacts.label != "full_name":
        return
    users = fetch_dicts(conn, "SELECT * FROM users WHERE id > 1 AND active = 1 ORDER BY id")
    rows = fetch_dicts(conn, "SELECT * FROM contacts ORDER BY id")
    rng.shuffle(users)
    made = 0
    for user in users:
        if made >= count or not rows:
            break
        if conn.execute("SELECT 1 FROM contacts WHERE full_name LIKE ?", (f"%{user['full_name']}%",)).fetchone():
            continue
        twin = {**rng.choice(rows), "id": _next_id(conn, contacts), "full_name": user["full_name"]}
        if not _fresh_uniques(conn, contacts, twin, "", user["full_name"]):
            continue
        if twin.get("email") == user.get("email"):
            continue
        made += _keep(spec, conn, contacts, twin)


def _keep(spec: WorldSpec, conn: sqlite3.Connection, table: TableDef, twin: dict[str, Any]) -> int:
    """Insert the twin if it keeps every invariant; 1 if kept."""
    conn.execute("SAVEPOINT twin")
    try:
        _insert(conn, table, twin)
    except sqlite3.IntegrityError:
        conn.execute("ROLLBACK TO twin")
        conn.execute("RELEASE twin")
        return 0
    if not _invariants_hold(spec, conn):
        conn.execute("ROLLBACK TO twin")
        conn.execute("RELEASE twin")
        return 0
    conn.execute("RELEASE twin")
    return 1


def seed_twins(spec: WorldSpec, vocab: Vocabulary, conn: sqlite3.Connection) -> None:
    """Append ``brief.twins`` near-duplicate pairs of each kind to the seed (inside the caller's transaction);
    twins the realism audit objects to are taken out again."""
    count = spec.brief.twins
    if count <= 0:
        return
    rng = stage_rng(spec.brief.generation_seed, "twins")
    _dated(spec, conn, rng, count)
    _named(spec, vocab, conn, rng, count)
    _same_name(spec, conn, rng, count)
    for v in audit_db(spec, conn, invariants=False).violations:  # each twin kept the invariants (_keep)
        table = spec.table(v.table)
        if table.rows is not None and v.row > table_rows(table, spec.brief.scale):
            conn.execute(f"DELETE FROM {table.name} WHERE id = ?", (v.row,))


def find_twins(spec: WorldSpec, conn: sqlite3.Connection) -> list[Twin]:
    """The seeded pairs, read back from a seed database: every row past its table's generated rows is a twin."""
    out: list[Twin] = []
    for table, _parent, day in dated_tables(spec):
        n = table_rows(table, spec.brief.scale)
        same = [c.name for c in table.columns if c.name not in (table.label, day) and c.type != "date"]
        for twin in fetch_dicts(conn, f"SELECT * FROM {table.name} WHERE id > ? ORDER BY id", (n,)):
            where = " AND ".join(f"{c} IS ?" for c in same)
            src = conn.execute(f"SELECT id FROM {table.name} WHERE id <= ? AND {where} ORDER BY id",
                               (n, *(twin[c] for c in same))).fetchone()
            if src:
                out.append(Twin("dated", table.name, src[0], twin["id"]))
    for table in named_tables(spec):
        n = table_rows(table, spec.brief.scale)
        for twin in fetch_dicts(conn, f"SELECT * FROM {table.name} WHERE id > ? ORDER BY id", (n,)):
            src = conn.execute(f"SELECT id, {table.label} FROM {table.name} WHERE id <= ? ORDER BY id",
                               (n,)).fetchall()
            hit = next((i for i, name in src if str(twin[table.label]).startswith(f"{name}-")
                        or str(twin[table.label]).startswith(f"{name} ")), None)
            if hit is not None:
                out.append(Twin("named", table.name, hit, twin["id"]))
    if spec.has_table("contacts") and spec.has_table("users") and spec.table("contacts").rows is not None:
        n = table_rows(spec.table("contacts"), spec.brief.scale)
        for twin in fetch_dicts(conn, "SELECT id, full_name FROM contacts WHERE id > ? ORDER BY id", (n,)):
            user = conn.execute("SELECT id FROM users WHERE full_name = ?", (twin["full_name"],)).fetchone()
            if user:
                out.append(Twin("same_name", "contacts", user[0], twin["id"]))
    return out

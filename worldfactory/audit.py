"""The realism audit: does a world's data keep to its own clock and to the order of its records?

Every date column has a meaning (an event that happened, a plan that may lie ahead, or a period bound);
a pack may declare it (`date_meaning` on the column), else it is inferred from the column's name by the
rules in `MEANING_RULES` (worldfactory/dates.py), the one place they live. Four rules are checked over a seed.db:

- `event_after_today`: an event date lies after the world's clock (`brief.clock`);
- `event_before_parent`: an event date lies before the origin date of a record the row refers to (a
  contact created before its account, a claim filed before its policy starts);
- `done_but_ahead`: a row whose status says the work is done has a plan date after the clock (a
  completed booking scheduled next month);
- `waiting_but_past`: its mirror, a row whose status says it still waits for its day (WAITING_STATUSES) has a
  plan date more than WAITING_GRACE_DAYS before the clock (a meeting still scheduled a month after it fell);
  the rows of the last days stay waiting, for the tasks that settle them (mark yesterday's meeting held).

Then the cross-record constraints the tables declare (worldfactory/constraints.py), one rule per kind:
`total`, `band`, `limit`, `category`, `refers`, `same`; and the pack's invariants (rule `invariant`: one
count of offending rows each), so an oracle whose end state breaks one is caught as the seed would be.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel

from worldfactory import packsql
from worldfactory.constraints import check as check_constraints
from worldfactory.dates import date_meaning
from worldfactory.spec import CONSTRAINT_KINDS, SourcedInvariant, TableDef, WorldSpec

# Statuses that say the record's work has happened: its plan dates must not lie ahead.
DONE_STATUSES = frozenset({
    "completed", "complete", "closed", "closed_out", "resolved", "paid", "delivered", "returned", "received",
    "fixed", "implemented", "installed", "executed", "picked_up", "settled", "refunded", "restored", "done",
    "finished", "attended", "held", "checked_out", "no_show", "substantially_complete", "pod_received",
    "invoiced", "worked",
})
# Statuses that say the record still waits for its day: its plan dates must not lie long past. `confirmed` is
# not one: the packs use it for a booking that was honoured (a stay confirmed and taken).
WAITING_STATUSES = frozenset({"scheduled", "planned", "tentative", "requested", "pending", "booked"})
# How long a waiting row may stay past its day: someone has yet to mark it held, a no-show or cancelled.
WAITING_GRACE_DAYS = 14
# A reference into the staff table is an assignment that may change hands (an account's owner), so a
# record older than its current owner's hire date is no contradiction; the actor of the event is checked.
STAFF_TABLES = frozenset({"users"})
ACTOR_REF = r"_by$|^(author|sender|actor|user)_id$"
# a plan date that begins a record (a policy's start; not a work order's planned start, which notes precede)
ORIGIN_PLAN = r"^(start_date|starts_on|period_start)$"
RULES = ("event_after_today", "event_before_parent", "done_but_ahead", "waiting_but_past", *CONSTRAINT_KINDS,
         "invariant")
# An invariant written `SELECT count(*) FROM table [alias] ...` can name its first offending row: the same
# statement selecting the row's id. Any other shape (a count over a GROUP BY) names its table only.
COUNT_FROM = re.compile(r"^\s*SELECT\s+count\(\s*\*\s*\)\s+FROM\s+(\w+)(?:\s+(?:AS\s+)?"
                        r"(?!(?:WHERE|JOIN|LEFT|INNER|CROSS|NATURAL|GROUP|ORDER|LIMIT|WINDOW|HAVING)\b)(\w+))?(?=\s|$)",
                        re.I)
PER = 1000


class Violation(BaseModel):
    rule: str
    table: str
    row: int
    column: str
    detail: str


class AuditReport(BaseModel):
    world_id: str
    clock: str
    checked_rows: int
    violations: list[Violation]

    def by_rule(self) -> dict[str, int]:
        counts = Counter(v.rule for v in self.violations)
        return {r: counts.get(r, 0) for r in RULES}

    def per_thousand(self) -> float:
        return round(PER * len(self.violations) / self.checked_rows, 2) if self.checked_rows else 0.0


def status_column(table: TableDef) -> str | None:
    """The column a row's state lives in: its workflow's, else a column named `status`."""
    names = {c.name for c in table.columns}
    col = table.workflow.column if table.workflow else "status"
    return col if col in names else None


def is_done(table: TableDef, row: dict[str, Any]) -> bool:
    """Whether the row's status says its work has happened (DONE_STATUSES)."""
    status = status_column(table)
    return status is not None and row.get(status) in DONE_STATUSES


def is_waiting(table: TableDef, row: dict[str, Any]) -> bool:
    """Whether the row's status says it still waits for its day (WAITING_STATUSES)."""
    status = status_column(table)
    return status is not None and row.get(status) in WAITING_STATUSES


def waiting_floor(clock: str | date) -> str:
    """The earliest plan date a waiting row may keep on this clock (WAITING_GRACE_DAYS before it)."""
    day = date.fromisoformat(clock) if isinstance(clock, str) else clock
    return (day - timedelta(days=WAITING_GRACE_DAYS)).isoformat()


def origin_column(table: TableDef) -> str | None:
    """The date a record begins at, for its children: its first event date, else a plan date that starts it
    (ORIGIN_PLAN); None when it has neither (an event's deposits may well come before the event's date)."""
    dates = [c for c in table.columns if c.type == "date" and not c.when]
    for c in dates:
        if date_meaning(c) == "event":
            return c.name
    for c in dates:
        if re.search(ORIGIN_PLAN, c.name):
            return c.name
    return None


def parent_refs(spec: WorldSpec, table: TableDef) -> list[tuple[str, str]]:
    """(column, parent table) of the references whose parent must predate the row's events: every
    reference with an origin date, but staff assignments (STAFF_TABLES unless ACTOR_REF names an actor)."""
    out: list[tuple[str, str]] = []
    for c in table.columns:
        if not c.ref or c.poly_ref:
            continue
        parent = spec.anchor if c.ref == "$anchor" else c.ref
        if not spec.has_table(parent) or origin_column(spec.table(parent)) is None:
            continue
        if parent in STAFF_TABLES and not re.search(ACTOR_REF, c.name):
            continue
        out.append((c.name, parent))
    return out


class _Static(NamedTuple):
    """What the audit reads from a spec alone, once per spec: per table its origin column, its parent refs
    (parent_refs) and every plain reference (column, parent)."""
    origins: dict[str, str | None]
    parents: dict[str, list[tuple[str, str]]]
    refs: dict[str, list[tuple[str, str]]]


_STATIC: dict[int, tuple[WorldSpec, _Static]] = {}


def _static(spec: WorldSpec) -> _Static:
    hit = _STATIC.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    refs = {t.name: [(c.name, spec.anchor if c.ref == "$anchor" else c.ref) for c in t.columns
                     if c.ref and not c.poly_ref] for t in spec.tables}
    out = _Static({t.name: origin_column(t) for t in spec.tables},
                  {t.name: parent_refs(spec, t) for t in spec.tables}, refs)  # type: ignore[arg-type]
    if len(_STATIC) > 64:
        _STATIC.clear()
    _STATIC[id(spec)] = (spec, out)
    return out


class _Inv(NamedTuple):
    """An invariant as the audit runs it: the tables it reads (an end state that changed none of them keeps
    the seed's count, 0), the table it is reported on and the statement that finds its first offending row."""
    inv: SourcedInvariant
    reads: frozenset[str]
    table: str
    first_row: str | None


_INVARIANTS: dict[int, tuple[WorldSpec, list[_Inv]]] = {}


def _reads(scratch: sqlite3.Connection, sql: str) -> list[str]:
    """The tables a statement reads, in the order SQLite compiles them (it is compiled, never run)."""
    seen: list[str] = []

    def auth(action: int, a1: str | None, _a2: str | None, _db: str | None, _trigger: str | None) -> int:
        if action == sqlite3.SQLITE_READ and a1 and a1 not in seen:
            seen.append(a1)
        return sqlite3.SQLITE_OK

    scratch.set_authorizer(auth)
    try:
        scratch.execute("EXPLAIN " + sql)
    finally:
        scratch.set_authorizer(None)
    return seen


def _invariants(spec: WorldSpec, conn: sqlite3.Connection) -> list[_Inv]:
    """The spec's invariants, each checked as pack SQL (packsql.refusal) once per spec on an empty copy of the
    schema: the connection audited may carry an authorizer of its own (an episode's gate) to keep."""
    hit = _INVARIANTS.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    ddl = [sql for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                                          "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    scratch = sqlite3.connect(":memory:")
    out: list[_Inv] = []
    try:
        for sql in ddl:
            scratch.execute(sql)
        for inv in spec.invariants:
            why = packsql.refusal(scratch, inv.sql, "invariant")
            if why:
                raise packsql.PackSQLError(f"invariant '{inv.name}' ({inv.source}): {why}")
            reads = _reads(scratch, inv.sql)
            m = COUNT_FROM.match(inv.sql)
            first = None
            if m and not re.search(r"\b(GROUP\s+BY|LIMIT|ORDER\s+BY)\b", inv.sql, re.I):
                alias = m[2] or m[1]
                first = f"SELECT {alias}.id FROM {inv.sql[m.start(1):]} ORDER BY {alias}.id LIMIT 1"
                if packsql.refusal(scratch, first, "invariant"):
                    first = None
            table = m[1] if m else (reads[0] if reads else "")
            out.append(_Inv(inv, frozenset(reads), table, first))
    finally:
        scratch.close()
    if len(_INVARIANTS) > 64:
        _INVARIANTS.clear()
    _INVARIANTS[id(spec)] = (spec, out)
    return out


def check_invariants(spec: WorldSpec, conn: sqlite3.Connection,
                     changed: dict[str, set[int]] | None = None) -> list[Violation]:
    """A violation for each invariant that counts offending rows, on its table and first offending row where its
    statement names them (row 0 where it cannot). With `changed`, only the invariants that read a changed table:
    the others count what the seed counted, 0."""
    found: list[Violation] = []
    for run in _invariants(spec, conn):
        if changed is not None and not any(changed.get(t) for t in run.reads):
            continue
        where = f"invariant '{run.inv.name}' ({run.inv.source})"
        with packsql.bounded(conn, where):
            got = conn.execute(run.inv.sql).fetchone()
            bad = int(got[0] or 0) if got else 0
            row = 0
            if bad and run.first_row:
                first = conn.execute(run.first_row).fetchone()
                row = int(first[0]) if first and first[0] is not None else 0
        if bad:
            found.append(Violation(rule="invariant", table=run.table, row=row, column="",
                                   detail=f"invariant '{run.inv.name}' fails for {bad} rows ({run.inv.source})"))
    return found


def _ids(ids: set[int]) -> str:
    return ", ".join(str(int(i)) for i in sorted(ids))


def _touched_scope(spec: WorldSpec, static: _Static,
                   changed: dict[str, set[int]]) -> tuple[dict[str, str], dict[str, str]]:
    """For an audit of changed rows only, per table the condition that picks the rows a change can affect:
    for the date rules, the changed rows and the rows whose parent's origin date may have moved; for the
    constraints (on alias `r`), the changed rows and the rows of any changed parent (a band, a category by
    kind, a status they must refer to). A table no condition names cannot break."""
    dates: dict[str, list[str]] = {}
    rows: dict[str, list[str]] = {}
    for table in spec.tables:
        ids = changed.get(table.name)
        if ids:
            dates.setdefault(table.name, []).append(f"id IN ({_ids(ids)})")
            rows.setdefault(table.name, []).append(f"r.id IN ({_ids(ids)})")
        for ref_col, parent in static.parents[table.name]:
            if changed.get(parent):
                dates.setdefault(table.name, []).append(f"{ref_col} IN ({_ids(changed[parent])})")
        for ref_col, parent in static.refs[table.name]:
            if changed.get(parent):
                rows.setdefault(table.name, []).append(f"r.{ref_col} IN ({_ids(changed[parent])})")
        for c in table.constraints:  # a total over changed (or deleted) lines: the whole table, it is one query
            of = getattr(c, "of", None)
            if isinstance(of, str) and changed.get(of.split(".", 1)[0]):
                rows[table.name] = ["1"]
    return ({t: " OR ".join(p) for t, p in dates.items()},
            {t: "(" + " OR ".join(p) + ")" for t, p in rows.items()})


def audit_db(spec: WorldSpec, conn: sqlite3.Connection, changed: dict[str, set[int]] | None = None,
             invariants: bool = True) -> AuditReport:
    """Check every row of every table against the date rules and its table's constraints, then the pack's
    invariants (unless the caller has just checked them); a row counts as checked when it has a date or its
    table declares a constraint. With `changed` (table -> row ids an episode wrote, over a seed that passed),
    only what those writes can break is checked: the same violations at a cost that follows the changed rows
    (the end state of an oracle plan)."""
    today = spec.brief.clock
    floor = waiting_floor(today)
    static = _static(spec)
    scope: dict[str, str] | None = None
    rows: dict[str, str] | None = None
    if changed is not None:
        scope, rows = _touched_scope(spec, static, changed)
    origin_cols = static.origins
    tables: dict[str, dict[int, str]] = {}  # a whole audit: each parent's origin dates in one query
    rows_read: dict[tuple[str, int], str | None] = {}  # a scoped one: only the parents its rows name

    def origin_of(parent: str, pid: int) -> str | None:
        if changed is None:
            if parent not in tables:
                tables[parent] = {i: d for i, d in conn.execute(f"SELECT id, {origin_cols[parent]} FROM {parent}")
                                  if d}
            return tables[parent].get(pid)
        key = (parent, pid)
        if key not in rows_read:
            got = conn.execute(f"SELECT {origin_cols[parent]} FROM {parent} WHERE id = ?", (pid,)).fetchone()
            rows_read[key] = got[0] if got else None
        return rows_read[key]

    found: list[Violation] = []
    checked = 0
    for table in spec.tables:
        dates = [c for c in table.columns if c.type == "date"]
        if scope is not None and (table.name not in scope if dates else table.name not in (rows or {})):
            continue
        if not dates:
            if table.constraints:
                where = "" if rows is None else f" r WHERE {rows[table.name]}"
                checked += conn.execute(f"SELECT count(*) FROM {table.name}{where}").fetchone()[0]
            continue
        cond = "" if scope is None else f" WHERE {scope[table.name]}"
        events = [c.name for c in dates if date_meaning(c) == "event"]
        plans = [c.name for c in dates if date_meaning(c) == "plan"]
        status = status_column(table)
        refs = static.parents[table.name]
        cur = conn.execute(f"SELECT * FROM {table.name}{cond} ORDER BY id")
        names = [d[0] for d in cur.description]
        for values in cur:
            row: dict[str, Any] = dict(zip(names, values, strict=True))
            checked += 1
            rid = row["id"]
            for name in events:
                when = row.get(name)
                if when is None:
                    continue
                if when > today:
                    found.append(Violation(rule="event_after_today", table=table.name, row=rid, column=name,
                                           detail=f"{name} {when} is after today {today}"))
                for ref_col, parent in refs:
                    pid = row.get(ref_col)
                    start = origin_of(parent, pid) if pid is not None else None
                    if start is not None and when < start:
                        found.append(Violation(
                            rule="event_before_parent", table=table.name, row=rid, column=name,
                            detail=f"{name} {when} is before {parent} {pid}'s {origin_cols[parent]} "
                                   f"{start} ({ref_col})"))
            if status and is_done(table, row):
                for name in plans:
                    when = row.get(name)
                    if when is not None and when > today:
                        found.append(Violation(rule="done_but_ahead", table=table.name, row=rid, column=name,
                                               detail=f"{status} '{row[status]}' but {name} {when} is after "
                                                      f"today {today}"))
            elif status and is_waiting(table, row):
                for name in plans:
                    when = row.get(name)
                    if when is not None and when < floor:
                        found.append(Violation(rule="waiting_but_past", table=table.name, row=rid, column=name,
                                               detail=f"{status} '{row[status]}' but {name} {when} is more than "
                                                      f"{WAITING_GRACE_DAYS} days before today {today}"))
    found += [Violation(rule=rule, table=table, row=rid, column=col, detail=detail)
              for rule, table, rid, col, detail in check_constraints(spec, conn, rows)]
    if invariants:
        found += check_invariants(spec, conn, changed)
    return AuditReport(world_id=spec.brief.world_id, clock=today, checked_rows=checked, violations=found)


def audit_bundle(bundle: Path) -> AuditReport:
    """Audit a built world's seed.db against its spec.json (read-only)."""
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_bytes())
    conn = sqlite3.connect(f"file:{bundle / 'seed.db'}?mode=ro", uri=True)
    try:
        return audit_db(spec, conn)
    finally:
        conn.close()


def audit_image(spec: WorldSpec, image: bytes) -> AuditReport:
    """Audit a seed image in memory (the seed stage's bytes)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(image)
        return audit_db(spec, conn)
    finally:
        conn.close()


def audit_oracle_ends(bundle: Path) -> AuditReport:
    """Audit the end state of every task's oracle plan, each on a fresh copy of the seed: a violation's
    `detail` names the task whose plan left it. Checked rows add up over the end states."""
    from worldfactory.runtime.world import World

    world = World.open(bundle)
    checked = 0
    found: list[Violation] = []
    for task_id, task in sorted(world.tasks.items()):
        with world.episode(task_id) as ep:  # its own episode: an ask task's requester answers
            for call in task.oracle:
                if not ep.call(call.tool, call.args).ok:
                    break
            report = audit_db(world.spec, ep.conn)
        checked += report.checked_rows
        found += [v.model_copy(update={"detail": f"after task {task_id}: {v.detail}"}) for v in report.violations]
    return AuditReport(world_id=world.spec.brief.world_id, clock=world.spec.brief.clock, checked_rows=checked,
                       violations=found)

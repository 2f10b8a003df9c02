"""Cross-record constraints: a world's numbers and references agree with each other.

A pack declares them per table (`constraints:` in its YAML; the kinds are typed in worldfactory/spec.py):
`total` (a column equals the sum of its lines'), `band` (a value, or a date, within its parent's min/max: a
group's booking arrives within its block's dates), `limit` (at most a rule's value, unless a column marks the
exception), `category` (ranges, allowed values or, for a date, days of the year by a kind column), `refers` (a
reference respects the referenced row's state), `same` (ownership: a column equals the referenced row's) and
`past` (a value that follows the clock once a date has gone by).
Three users read them, one definition each:

- `Fitter`: the seed generator (generate/data.py) moves a drawn row into its constraints, so a seed starts true;
- `check`: the realism audit (audit.py) lists every row that breaks one, naming table, row and rule;
- `check_pack_constraints`: pack checking (packs.py) names the file and field of a bad declaration.
"""

from __future__ import annotations

import math
import random
import sqlite3
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from worldfactory.spec import (
    BandC,
    CategoryC,
    ColumnDef,
    Constraint,
    LimitC,
    PastC,
    RefersC,
    SameC,
    TableDef,
    TotalC,
    WorldSpec,
    constraint_kind,
)

NUMERIC = ("integer", "number", "money")
TOLERANCE = 0.005  # money is kept to cents
# (rule, table, row id, column, detail): what `check` finds; audit.py makes each a Violation
Broken = tuple[str, str, int, str, str]


def _norm(v: Any) -> Any:
    """YAML's true/false as SQLite stores booleans."""
    return int(v) if isinstance(v, bool) else v


def _holds(row: dict[str, Any], when: dict[str, list[Any]]) -> bool:
    return all(row.get(k) in [_norm(v) for v in vals] for k, vals in when.items())


def _ref_table(spec: WorldSpec, table: TableDef, column: str) -> str | None:
    try:
        ref = table.column(column).ref
    except KeyError:
        return None
    return spec.anchor if ref == "$anchor" else ref


def lines_of(spec: WorldSpec, table: TableDef, c: TotalC) -> tuple[str, str, str] | None:
    """(lines table, summed column, the lines' column that refers to `table`) of a total, or None when the
    lines table is not in this world (a dropped module) or no single column refers back."""
    child_name, col = c.of.split(".", 1)
    if not spec.has_table(child_name):
        return None
    child = spec.table(child_name)
    if c.by:
        return child_name, col, c.by
    back = [x.name for x in child.columns if (spec.anchor if x.ref == "$anchor" else x.ref) == table.name]
    return (child_name, col, back[0]) if len(back) == 1 else None


def applies(spec: WorldSpec, table: TableDef, c: Constraint) -> bool:
    """Whether every table, column and rule the constraint names is in this world (a module may be dropped)."""
    names = {x.name for x in table.columns}
    if isinstance(c, TotalC):
        return c.total in names and lines_of(spec, table, c) is not None
    if isinstance(c, LimitC):
        return c.limit in names and c.rule in spec.brief.rules
    if isinstance(c, CategoryC):
        ref, _, attr = c.by.partition(".")
        parent = _ref_table(spec, table, ref) if attr else None
        return {c.category, ref} <= names and (not attr or (parent is not None and spec.has_table(parent)))
    if isinstance(c, PastC):
        return {c.past, c.then} <= names
    ref = c.ref if isinstance(c, BandC) else c.refers if isinstance(c, RefersC) else c.as_.split(".")[0]
    parent = _ref_table(spec, table, ref)
    return parent is not None and spec.has_table(parent)


def _rounded(col: ColumnDef, value: float) -> float | int:
    return int(round(value)) if col.type == "integer" else round(value, 2)


def _within(col: ColumnDef, rng: random.Random, lo: float, hi: float) -> float | int:
    """A value drawn in [lo, hi], of the column's type (a whole number where it is an integer)."""
    if col.type == "integer":
        a, b = math.ceil(lo), math.floor(hi)
        return rng.randint(a, b) if a <= b else int(round(hi))
    return round(rng.uniform(lo, hi), 2)


def _day_within(rng: random.Random, lo: str, hi: str) -> str:
    """An ISO date drawn in [lo, hi] (a date band: the days of the parent's period)."""
    a, b = date.fromisoformat(lo), date.fromisoformat(hi)
    return (a + timedelta(days=rng.randint(0, (b - a).days))).isoformat()


def _scale(lines: list[dict[str, Any]], col: str, want: float, have: float) -> None:
    """Scale the lines' amounts to sum to `want` in cents, the rounding left on the last line."""
    for line in lines:
        line[col] = round(float(line[col]) * want / have, 2)
    lines[-1][col] = round(want - sum(float(x[col]) for x in lines[:-1]), 2)


class Fitter:
    """Moves generated rows into their table's constraints, drawing from the world's generation rng only where
    a row breaks one, so a pack without constraints keeps its bytes. `rows` holds every table generated so far."""

    def __init__(self, spec: WorldSpec, rng: random.Random, rows: dict[str, list[dict[str, Any]]]) -> None:
        self.spec = spec
        self.rng = rng
        self.rows = rows
        self.active: dict[str, list[Constraint]] = {
            t.name: [c for c in t.constraints if applies(spec, t, c)] for t in spec.tables}
        # per table: the per-row constraints in declaration order, each as (constraint, its fit, the column it
        # changes, the columns it reads, its `when` with booleans as stored), looked up by changed column too
        self.plans: dict[str, list[tuple[Any, Callable[..., None], str, tuple[str, ...], dict[str, list[Any]]]]] = {}
        self.by_target: dict[str, set[str]] = {}
        for name, cs in self.active.items():
            plan = []
            for c in cs:
                if isinstance(c, TotalC):
                    continue
                target, needs = _target(c)
                when = {k: [_norm(v) for v in vals] for k, vals in c.when.items()}
                plan.append((c, _FIT[constraint_kind(c)], target, (*needs, *when), when))
            if plan:
                self.plans[name] = plan
                self.by_target[name] = {p[2] for p in plan}

    def _parent(self, table: str | None, pid: Any) -> dict[str, Any] | None:
        rows = self.rows.get(table or "")
        if rows is None or not isinstance(pid, int) or not 1 <= pid <= len(rows):
            return None
        return rows[pid - 1]  # ids are 1..n in generation order

    def fit_row(self, table: TableDef, row: dict[str, Any], drawn: str | None = None) -> None:
        """Fit the row to its per-row constraints: those on column `drawn` whose inputs the row already has
        (so values derived from it follow, as a fraction_of the fitted amount does), or all with drawn=None."""
        plan = self.plans.get(table.name)
        if plan is None or (drawn is not None and drawn not in self.by_target[table.name]):
            return
        for c, fit, target, reads, when in plan:
            if drawn is not None and (target != drawn or not all(k in row for k in reads)):
                continue
            if all(row.get(k) in vals for k, vals in when.items()):
                fit(self, table, c, row)

    def fit_totals(self) -> None:
        """Set every `total` to the sum of its lines, lines before their parents (a nested total sums fitted lines)."""
        for table in reversed(self.spec.tables):
            for c in self.active.get(table.name, []):
                if not isinstance(c, TotalC):
                    continue
                child, col, by = lines_of(self.spec, table, c)  # type: ignore[misc]
                lines: dict[int, list[dict[str, Any]]] = {}
                for line in self.rows.get(child, []):
                    if line.get(by) is not None and line.get(col) is not None:
                        lines.setdefault(line[by], []).append(line)
                target = table.column(c.total)
                for row in self.rows.get(table.name, []):
                    mine = lines.get(row["id"])
                    if not mine or not _holds(row, c.when):
                        continue
                    total = sum(float(x[col]) for x in mine)
                    if c.adjust == "lines" and row.get(c.total) is not None and total > 0:
                        _scale(mine, col, float(row[c.total]), total)
                    else:
                        row[c.total] = _rounded(target, total)

    def _band(self, table: TableDef, c: BandC, row: dict[str, Any]) -> None:
        parent = self._parent(_ref_table(self.spec, table, c.ref), row.get(c.ref))
        value = row.get(c.band)
        if parent is None or value is None:
            return
        lo = parent.get(c.min) if c.min else None
        hi = parent.get(c.max) if c.max else None
        if (lo is None or value >= lo) and (hi is None or value <= hi):
            return
        col = table.column(c.band)
        if lo is not None and hi is not None and lo <= hi:
            row[c.band] = _day_within(self.rng, lo, hi) if col.type == "date" else _within(col, self.rng, lo, hi)
        else:
            row[c.band] = lo if lo is not None and value < lo else hi

    def _limit(self, table: TableDef, c: LimitC, row: dict[str, Any]) -> None:
        cap = self.spec.brief.rules[c.rule]
        value = row.get(c.limit)
        if value is None or value <= cap or (c.unless and row.get(c.unless)):
            return
        col = table.column(c.limit)
        floor = col.minimum if col.minimum is not None else 0.0
        row[c.limit] = _within(col, self.rng, max(floor, cap / 2), cap)

    def _category(self, table: TableDef, c: CategoryC, row: dict[str, Any]) -> None:
        ref, _, attr = c.by.partition(".")
        if attr:
            parent = self._parent(_ref_table(self.spec, table, ref), row.get(ref))
            kind = parent.get(attr) if parent is not None else None
        else:
            kind = row.get(c.by)
        value = row.get(c.category)
        if value is None:
            return
        if c.ranges is not None and kind in c.ranges:
            lo, hi = c.ranges[kind]
            if not lo <= value <= hi:
                row[c.category] = _within(table.column(c.category), self.rng, lo, hi)
        elif c.allowed is not None and kind in c.allowed:
            allowed = [_norm(v) for v in c.allowed[kind]]
            if value not in allowed:
                row[c.category] = self.rng.choice(allowed)
        elif c.month_days is not None and kind in c.month_days and str(value)[5:] not in c.month_days[kind]:
            row[c.category] = nearest_day(str(value), c.month_days[kind])

    def _refers(self, table: TableDef, c: RefersC, row: dict[str, Any]) -> None:
        name = _ref_table(self.spec, table, c.refers)
        parent = self._parent(name, row.get(c.refers))
        if parent is None or _holds(parent, c.to):
            return
        fits = [p["id"] for p in self.rows.get(name or "", []) if _holds(p, c.to)]
        if fits:
            row[c.refers] = self.rng.choice(fits)
        elif table.column(c.refers).nullable:
            row[c.refers] = None

    def _past(self, table: TableDef, c: PastC, row: dict[str, Any]) -> None:
        when = row.get(c.past)
        allowed = [_norm(v) for v in c.allowed]
        if c.fit == "status" and when is not None and when < self.spec.brief.clock and row.get(c.then) not in allowed:
            row[c.then] = self.rng.choice(allowed)

    def fit_clock(self, table: TableDef, row: dict[str, Any]) -> None:
        """Fit the row's `past` constraints once its dates are final (they follow the clock, read last); a
        status one moves may bring others into force (a confirmed booking keeps the hours limit), fitted again."""
        before = dict(row)
        for c, fit, _target, _reads, when in self.plans.get(table.name, []):
            if isinstance(c, PastC) and all(row.get(k) in vals for k, vals in when.items()):
                fit(self, table, c, row)
        if row != before:
            self.fit_row(table, row)

    def _same(self, table: TableDef, c: SameC, row: dict[str, Any]) -> None:
        ref, attr = c.as_.split(".", 1)
        name = _ref_table(self.spec, table, ref)
        parent = self._parent(name, row.get(ref))
        if parent is None or row.get(c.same) == parent.get(attr):
            return
        if parent.get(attr) is not None or table.column(c.same).nullable:
            row[c.same] = parent.get(attr)
            return
        fits = [p["id"] for p in self.rows.get(name or "", []) if p.get(attr) == row.get(c.same)]
        if fits:  # the owner cannot be empty: point at a record the owner has
            row[ref] = self.rng.choice(fits)


def nearest_day(drawn: str, days: list[str]) -> str:
    """The date falling on one of the MM-DD `days` nearest the drawn date (the earlier on a tie), so a date
    moved onto its kind's day stays near where the generator drew it; no random draw."""
    start = date.fromisoformat(drawn)
    candidates = []
    for year in range(start.year - 4, start.year + 5):  # four years either side: 02-29 is in one of them
        for day in days:
            try:
                candidates.append(date.fromisoformat(f"{year:04d}-{day}"))
            except ValueError:  # 02-29 of a year without one
                continue
    return min(candidates, key=lambda d: (abs((d - start).days), d)).isoformat()


def _target(c: Constraint) -> tuple[str, tuple[str, ...]]:
    """(the column a fit changes, the other columns it reads) of a per-row constraint."""
    if isinstance(c, BandC):
        return c.band, (c.ref,)
    if isinstance(c, LimitC):
        return c.limit, ((c.unless,) if c.unless else ())
    if isinstance(c, CategoryC):
        return c.category, (c.by.split(".")[0],)
    if isinstance(c, RefersC):
        return c.refers, ()
    if isinstance(c, SameC):
        return c.same, (c.as_.split(".")[0],)
    if isinstance(c, PastC):
        return c.then, (c.past,)
    return "", ()


_FIT: dict[str, Callable[[Fitter, TableDef, Any, dict[str, Any]], None]] = {
    "band": Fitter._band, "limit": Fitter._limit, "category": Fitter._category, "refers": Fitter._refers,
    "same": Fitter._same, "past": Fitter._past,
}


# --- the audit's side ------------------------------------------------------------------------------


def _where(alias: str, when: dict[str, list[Any]], only: str = "1") -> tuple[str, list[Any]]:
    """The `when` filter on `alias`, and `only` (the rows a scoped check is limited to) where it is not all."""
    parts, params = [], []
    for k, vals in when.items():
        parts.append(f"{alias}.{k} IN ({', '.join('?' * len(vals))})")
        params += [_norm(v) for v in vals]
    if only != "1":
        parts.append(only)
    return "".join(f" AND {p}" for p in parts), params


def _shown(values: list[Any]) -> str:
    return ", ".join(str(_norm(v)) for v in values)


def check(spec: WorldSpec, conn: sqlite3.Connection, rows: dict[str, str] | None = None) -> list[Broken]:
    """Every row that breaks a constraint of its table, in table and declaration order. With `rows` (table ->
    an SQL condition on its alias `r`), only those tables, and of each only the rows the condition picks (a
    total, checked on its parent table's alias `p`, takes its table whole)."""
    out: list[Broken] = []
    for table in spec.tables:
        if rows is not None and table.name not in rows:
            continue
        for i, c in enumerate(table.constraints):
            if applies(spec, table, c):
                found = _CHECK[constraint_kind(c)](spec, conn, table, c, i,
                                                   rows[table.name] if rows is not None else "1")
                out += found
    return out


def _check_total(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: TotalC, i: int,
                 only: str = "1") -> list[Broken]:
    child, col, by = lines_of(spec, t, c)  # type: ignore[misc]
    cond, params = _where("p", c.when)
    sql = (f"SELECT p.id, p.{c.total}, s.t, s.n FROM {t.name} p JOIN (SELECT {by} AS k, sum({col}) AS t, count(*) AS n "
           f"FROM {child} WHERE {col} IS NOT NULL GROUP BY {by}) s ON s.k = p.id "
           f"WHERE (p.{c.total} IS NULL OR abs(p.{c.total} - s.t) > {TOLERANCE}){cond} ORDER BY p.id")
    return [("total", t.name, rid, c.total, f"{c.total} {have} but its {n} {child} sum {round(s, 2)} ({c.of})")
            for rid, have, s, n in conn.execute(sql, params)]


def _check_band(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: BandC, i: int,
                only: str = "1") -> list[Broken]:
    parent = _ref_table(spec, t, c.ref)
    cond, params = _where("r", c.when, only)
    lo = f"p.{c.min}" if c.min else "NULL"
    hi = f"p.{c.max}" if c.max else "NULL"
    sql = (f"SELECT r.id, r.{c.band}, r.{c.ref}, {lo}, {hi} FROM {t.name} r JOIN {parent} p ON p.id = r.{c.ref} "
           f"WHERE ((r.{c.band} < {lo}) OR (r.{c.band} > {hi})){cond} ORDER BY r.id")
    return [("band", t.name, rid, c.band, f"{c.band} {v} is outside {parent} {pid}'s band {a}..{b} "
             f"({c.min or '-'}..{c.max or '-'})") for rid, v, pid, a, b in conn.execute(sql, params)]


def _check_limit(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: LimitC, i: int,
                 only: str = "1") -> list[Broken]:
    cap = spec.brief.rules[c.rule]
    cond, params = _where("r", c.when, only)
    unless = f" AND NOT coalesce(r.{c.unless}, 0)" if c.unless else ""
    sql = f"SELECT r.id, r.{c.limit} FROM {t.name} r WHERE r.{c.limit} > ?{unless}{cond} ORDER BY r.id"
    shown = "".join(f", {k} {_shown(v)}" for k, v in c.when.items())
    return [("limit", t.name, rid, c.limit, f"{c.limit} {v} is above the rule {c.rule} {cap:g}{shown}")
            for rid, v in conn.execute(sql, [cap, *params])]


def _check_category(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: CategoryC, i: int,
                    only: str = "1") -> list[Broken]:
    cond, params = _where("r", c.when, only)
    out: list[Broken] = []
    ref, _, attr = c.by.partition(".")
    kind, join = (f"p.{attr}", f" JOIN {_ref_table(spec, t, ref)} p ON p.id = r.{ref}") if attr else (f"r.{c.by}", "")
    sql = (f"SELECT r.id, {kind}, r.{c.category} FROM {t.name} r{join} WHERE r.{c.category} IS NOT NULL{cond} "
           f"ORDER BY r.id")
    for rid, kind, value in conn.execute(sql, params):
        if c.ranges is not None and kind in c.ranges:
            lo, hi = c.ranges[kind]
            if not lo <= value <= hi:
                out.append(("category", t.name, rid, c.category,
                            f"{c.category} {value} is outside {lo:g}..{hi:g} for {c.by} '{kind}'"))
        elif c.allowed is not None and kind in c.allowed and value not in [_norm(v) for v in c.allowed[kind]]:
            out.append(("category", t.name, rid, c.category,
                        f"{c.category} '{value}' is not one of {_shown(c.allowed[kind])} for {c.by} '{kind}'"))
        elif c.month_days is not None and kind in c.month_days and str(value)[5:] not in c.month_days[kind]:
            out.append(("category", t.name, rid, c.category,
                        f"{c.category} {value} does not fall on {_shown(c.month_days[kind])} (MM-DD) for {c.by} "
                        f"'{kind}'"))
    return out


def _check_refers(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: RefersC, i: int,
                  only: str = "1") -> list[Broken]:
    parent = _ref_table(spec, t, c.refers)
    cond, params = _where("r", c.when, only)
    ok, ok_params = _where("p", c.to)
    cols = ", ".join(f"p.{k}" for k in c.to)
    sql = (f"SELECT r.id, r.{c.refers}, {cols} FROM {t.name} r JOIN {parent} p ON p.id = r.{c.refers} "
           f"WHERE NOT (1{ok}){cond} ORDER BY r.id")
    out: list[Broken] = []
    for rid, pid, *held in conn.execute(sql, ok_params + params):
        has = ", ".join(f"{k} {v}" for k, v in zip(c.to, held, strict=True))
        want = "; ".join(f"{k} in {_shown(v)}" for k, v in c.to.items())
        out.append(("refers", t.name, rid, c.refers, f"{c.refers} {pid}: {parent} {pid} has {has}, not {want}"))
    return out


def _check_same(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: SameC, i: int,
                only: str = "1") -> list[Broken]:
    ref, attr = c.as_.split(".", 1)
    parent = _ref_table(spec, t, ref)
    cond, params = _where("r", c.when, only)
    sql = (f"SELECT r.id, r.{c.same}, r.{ref}, p.{attr} FROM {t.name} r JOIN {parent} p ON p.id = r.{ref} "
           f"WHERE r.{c.same} IS NOT p.{attr}{cond} ORDER BY r.id")
    return [("same", t.name, rid, c.same, f"{c.same} {v} but {parent} {pid}'s {attr} is {w} ({c.as_})")
            for rid, v, pid, w in conn.execute(sql, params)]


def _check_past(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, c: PastC, i: int,
                only: str = "1") -> list[Broken]:
    cond, params = _where("r", c.when, only)
    allowed = [_norm(v) for v in c.allowed]
    sql = (f"SELECT r.id, r.{c.then}, r.{c.past} FROM {t.name} r WHERE r.{c.past} < ? AND r.{c.then} NOT IN "
           f"({', '.join('?' * len(allowed))}){cond} ORDER BY r.id")
    today = spec.brief.clock
    return [("past", t.name, rid, c.then, f"{c.then} '{v}' but {c.past} {d} has passed (today {today}); "
             f"expected one of {_shown(c.allowed)}") for rid, v, d in conn.execute(sql, [today, *allowed, *params])]


_CHECK: dict[str, Callable[..., list[Broken]]] = {
    "total": _check_total, "band": _check_band, "limit": _check_limit, "category": _check_category,
    "refers": _check_refers, "same": _check_same, "past": _check_past,
}


# --- the pack's side ------------------------------------------------------------------------------


def check_pack_constraints(t: TableDef, tables: dict[str, TableDef], rules: set[str],
                           anchor: str | None) -> list[tuple[str, str]]:
    """(field under the table, what is wrong) for each bad declaration in `t.constraints`: a column, table or
    rule it names that the pack does not have, a number constraint on a column that is not a number."""
    out: list[tuple[str, str]] = []

    def column(loc: str, name: str, of: TableDef, numeric: bool = False) -> ColumnDef | None:
        have = {c.name: c for c in of.columns}
        if name not in have:
            out.append((loc, f"table '{of.name}' has no column '{name}'; known: {', '.join(sorted(have))}"))
            return None
        if numeric and have[name].type not in NUMERIC:
            out.append((loc, f"{of.name}.{name} is of type {have[name].type}; this constraint needs a number"))
        return have[name]

    def parent(loc: str, ref: str) -> TableDef | None:
        col = column(loc, ref, t)
        if col is None:
            return None
        if not col.ref:
            out.append((loc, f"{t.name}.{ref} is not a ref; name a column that refers to another table"))
            return None
        name = anchor if col.ref == "$anchor" else col.ref
        return tables.get(name or "")  # an unknown ref is reported where the column is checked

    def when(loc: str, of: TableDef, values: dict[str, list[Any]]) -> None:
        for key, vals in values.items():
            col = column(f"{loc}.{key}", key, of)
            if col is not None and col.enum:
                for v in vals:
                    if v not in col.enum:
                        out.append((f"{loc}.{key}", f"'{v}' is not a value of {of.name}.{key}; known: "
                                    f"{', '.join(col.enum)}"))

    for i, c in enumerate(t.constraints):
        kind = constraint_kind(c)
        loc = f"constraints[{i}:{kind}]"
        when(f"{loc}.when", t, c.when)
        if isinstance(c, TotalC):
            column(f"{loc}.total", c.total, t, numeric=True)
            child_name, col_name = c.of.split(".", 1)
            child = tables.get(child_name)
            if child is None:
                out.append((f"{loc}.of", f"'{child_name}' is not a table; known: {', '.join(sorted(tables))}"))
                continue
            column(f"{loc}.of", col_name, child, numeric=True)
            back = [x.name for x in child.columns if (anchor if x.ref == "$anchor" else x.ref) == t.name]
            if c.by is not None:
                if column(f"{loc}.by", c.by, child) is not None and c.by not in back:
                    out.append((f"{loc}.by", f"{child.name}.{c.by} does not refer to '{t.name}'"))
            elif len(back) != 1:
                out.append((f"{loc}.by", f"{child.name} has {len(back)} columns that refer to '{t.name}'; "
                            f"name the one its lines hang on ({', '.join(back) or 'none'})"))
        elif isinstance(c, BandC):
            have = {x.name: x for x in t.columns}
            is_date = c.band in have and have[c.band].type == "date"  # a date within the parent's period
            banded = column(f"{loc}.band", c.band, t, numeric=not is_date)
            p = parent(f"{loc}.ref", c.ref)
            for key in ("min", "max"):
                name = getattr(c, key)
                if p is None or name is None:
                    continue
                bound = column(f"{loc}.{key}", name, p, numeric=not is_date)
                if banded is not None and bound is not None and is_date and bound.type != "date":
                    out.append((f"{loc}.{key}", f"{p.name}.{name} is of type {bound.type}; the band of a date "
                                "(a child's date within its parent's period) is bounded by date columns"))
        elif isinstance(c, LimitC):
            column(f"{loc}.limit", c.limit, t, numeric=True)
            if c.rule not in rules:
                out.append((f"{loc}.rule", f"no rule '{c.rule}' in this pack or its modules; known: "
                            f"{', '.join(sorted(rules)) or 'none'}"))
            if c.unless is not None:
                col = column(f"{loc}.unless", c.unless, t)
                if col is not None and col.type != "boolean":
                    out.append((f"{loc}.unless", f"{t.name}.{c.unless} is of type {col.type}; 'unless' names a "
                                "boolean column that marks an allowed exception"))
        elif isinstance(c, CategoryC):
            target = column(f"{loc}.category", c.category, t, numeric=c.ranges is not None)
            ref, _, attr = c.by.partition(".")
            if attr:
                p = parent(f"{loc}.by", ref)
                by = column(f"{loc}.by", attr, p) if p is not None else None
            else:
                by = column(f"{loc}.by", c.by, t)
            field = "ranges" if c.ranges is not None else "allowed" if c.allowed is not None else "month_days"
            kinds = c.ranges if c.ranges is not None else c.allowed if c.allowed is not None else c.month_days or {}
            if target is not None and c.month_days is not None and target.type != "date":
                out.append((f"{loc}.category", f"{t.name}.{c.category} is of type {target.type}; month_days "
                            "names the days of the year a date column falls on"))
            if by is not None and by.enum:
                for k in kinds:
                    if k not in by.enum:
                        out.append((f"{loc}.{field}.{k}", f"'{k}' is not a value of {c.by}; known: "
                                    f"{', '.join(by.enum)}"))
            if target is not None and target.enum and c.allowed:
                for k, vals in c.allowed.items():
                    bad = [str(v) for v in vals if v not in target.enum]
                    if bad:
                        out.append((f"{loc}.allowed.{k}", f"{', '.join(bad)} not in {t.name}.{c.category}'s enum: "
                                    f"{', '.join(target.enum)}"))
        elif isinstance(c, RefersC):
            p = parent(f"{loc}.refers", c.refers)
            if p is not None:
                when(f"{loc}.to", p, c.to)
        elif isinstance(c, PastC):
            past = column(f"{loc}.past", c.past, t)
            if past is not None and past.type != "date":
                out.append((f"{loc}.past", f"{t.name}.{c.past} is of type {past.type}; 'past' names a date column"))
            then = column(f"{loc}.then", c.then, t)
            if then is not None and then.enum:
                bad = [str(v) for v in c.allowed if v not in then.enum]
                if bad:
                    out.append((f"{loc}.allowed", f"{', '.join(bad)} not in {t.name}.{c.then}'s enum: "
                                f"{', '.join(then.enum)}"))
        elif isinstance(c, SameC):
            column(f"{loc}.same", c.same, t)
            ref, attr = c.as_.split(".", 1)
            p = parent(f"{loc}.as", ref)
            if p is not None:
                column(f"{loc}.as", attr, p)
    return out

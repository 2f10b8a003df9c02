"""WorldSpec -> seed.db, consistent fictional operational data.

Rows are generated table by table in foreign-key order from the column generators declared in
the templates; child tables can be generated per parent row in given states (a paid claim gets a
payment). Every random choice comes from the world's generation seed.
"""

from __future__ import annotations

import random
import re
import sqlite3
from datetime import date, timedelta
from typing import Any

from worldfactory import packsql
from worldfactory.audit import audit_db, is_done, is_waiting, origin_column, parent_refs, waiting_floor
from worldfactory.constraints import Fitter
from worldfactory.dates import date_meaning
from worldfactory.fill import numbered
from worldfactory.generate.schema import schema_sql
from worldfactory.row_bounds import MAX_TABLE_ROWS, most_rows, table_rows, world_rows_problem
from worldfactory.seeds import stage_rng
from worldfactory.spec import ACTOR_ID, ColumnDef, SourcedInvariant, TableDef, Vocabulary, WorldSpec
from worldfactory.templates import TemplateError

EMAIL_DOMAINS = ["mail.example", "inbox.example", "post.example", "letters.example"]
UNIQUE_TRIES = 200




class SeedDataError(ValueError):
    """The seed database fails its proof (integrity, foreign keys, invariants)."""


class _Gen:
    """Evaluates column generator specs for one world."""

    def __init__(self, spec: WorldSpec, vocab: Vocabulary, rng: random.Random) -> None:
        self.spec = spec
        self.vocab = vocab
        self.rng = rng
        self.clock = date.fromisoformat(spec.brief.clock)
        self.waiting_floor = date.fromisoformat(waiting_floor(self.clock))  # read for every waiting row's plan date
        self.ids: dict[str, list[int]] = {}
        self.origins: dict[str, dict[int, str]] = {}  # per table: row id -> its origin date (audit.origin_column)
        self.refs: dict[str, list[tuple[str, str]]] = {}  # per table: audit.parent_refs
        self.drawn: dict[str, list[str]] = {}  # per name generator, the names drawn (for look-alikes)

    def _ids(self, table: str) -> list[int]:
        ids = self.ids.get(table)
        if not ids:  # a KeyError: _make_row reports it as a TemplateError naming the table and column
            raise KeyError(f"table '{table}' has no rows to refer to")
        return ids

    def _ref_value(self, ref: str, row: dict[str, Any], parent: dict[str, Any] | None) -> Any:
        if ref.startswith("parent."):
            if parent is None:
                raise KeyError(ref)
            return parent[ref[len("parent.") :]]
        return row[ref]

    def _named(self, name: str) -> str | None:
        """Draw for a named generator; template placeholders use the same names. With the brief's
        `distractors`, that share of person and company names take an earlier name's first word."""
        share = self.spec.brief.distractors
        if share and name in ("person_name", "company_name", "company"):
            return self._look_alike(name, share)
        return self._draw_named(name)

    def _look_alike(self, name: str, share: float) -> str:
        drawn = self.drawn.setdefault(name, [])
        out = self._draw_named(name)
        assert out is not None
        if drawn and self.rng.random() < share:
            first = self.rng.choice(drawn).split(" ", 1)[0]
            other = f"{first} {out.split(' ', 1)[-1]}"
            if other not in drawn:  # a look-alike, never a second record of the very same name
                out = other
        drawn.append(out)
        return out

    def _draw_named(self, name: str) -> str | None:
        r, v = self.rng, self.vocab
        if name == "person_name":
            return f"{r.choice(v.first_names)} {r.choice(v.last_names)}"
        if name in ("company_name", "company"):
            return f"{r.choice(v.company_words)} {r.choice(v.company_suffixes)}"
        if name == "first_name":
            return r.choice(v.first_names)
        if name == "last_name":
            return r.choice(v.last_names)
        if name == "city":
            return r.choice(v.cities)
        if name == "word":
            return r.choice(v.words).capitalize()
        if name == "phone":
            return f"555-{r.randint(100, 999)}-{r.randint(1000, 9999)}"
        if name == "sentence":
            return r.choice(v.sentences)
        return None

    def _template(self, text: str, n: int) -> str:
        drawn: dict[str, set[str]] = {}

        def sub(m: re.Match[str]) -> str:
            key = m.group(1)
            out = str(n) if key == "n" else self._named(key)
            if out is None:
                raise KeyError(f"template placeholder {{{key}}}")
            for _ in range(3):  # "{word} {word}" never says the same word twice
                if key == "n" or out not in drawn.get(key, set()):
                    break
                out = self._named(key) or out
            drawn.setdefault(key, set()).add(out)
            return out

        return re.sub(r"\{(\w+)\}", sub, text)

    def _bounds(self, col: ColumnDef, table: TableDef, row: dict[str, Any]) -> tuple[date | None, date | None]:
        """(floor, ceiling) of a date by its meaning (worldfactory/audit.py): an event, or a plan of a row whose
        status says done, at or before today; a plan of a row still waiting for its day, within the audit's grace
        before today (waiting_floor); an event at or after the origin of every record it belongs to."""
        meaning = date_meaning(col)
        ceiling = self.clock if meaning == "event" or (meaning == "plan" and is_done(table, row)) else None
        floor: date | None = None
        if meaning == "plan" and is_waiting(table, row):
            floor = self.waiting_floor
        if meaning == "event":
            if table.name not in self.refs:
                self.refs[table.name] = parent_refs(self.spec, table)
            for ref_col, ref_table in self.refs[table.name]:
                start = self.origins.get(ref_table, {}).get(row.get(ref_col))  # type: ignore[arg-type]
                if start is not None and (floor is None or start > floor.isoformat()):
                    floor = date.fromisoformat(start)
            if floor is not None and floor > self.clock:
                floor = None
        return floor, ceiling

    def keep_dates(self, table: TableDef, row: dict[str, Any], parent: dict[str, Any] | None,
                   cols: list[ColumnDef]) -> None:
        """Move the row's drawn dates, in the order drawn, into the bounds their meaning sets (_bounds): a range
        is mapped onto its bounded part, a date after another moves with it, a copy follows its source. No
        random draw, so a row whose dates already keep to the clock and to its parents is left as drawn."""
        raw = {c.name: row[c.name] for c in cols if c.type == "date"}
        for col in cols:
            drawn = row.get(col.name)
            if col.type != "date" or drawn is None:
                continue
            floor, ceiling = self._bounds(col, table, row)
            g = col.gen
            kind = next(iter(g)) if isinstance(g, dict) and g else None
            out = date.fromisoformat(drawn)
            if kind in ("days_ago", "days_around") and isinstance(g, dict):
                most, other = g[kind]
                lo0 = self.clock - timedelta(days=most)
                hi0 = self.clock - timedelta(days=other) if kind == "days_ago" else self.clock + timedelta(days=other)
                lo = max(lo0, floor) if floor is not None else lo0
                hi = max(lo, min(hi0, ceiling) if ceiling is not None else hi0)
                if (lo, hi) != (lo0, hi0):
                    out = lo + timedelta(days=(out - lo0).days * (hi - lo).days // max(1, (hi0 - lo0).days))
            elif kind in ("date_after", "copy") and isinstance(g, dict):
                ref = str(g[kind])
                if not ref.startswith("parent.") and row.get(ref) is not None and raw.get(ref) is not None:
                    moved = date.fromisoformat(row[ref]) - date.fromisoformat(raw[ref])
                    out = out + moved
                    if kind == "date_after" and g.get("cap", True):
                        out = max(date.fromisoformat(row[ref]), min(out, self.clock))
            if ceiling is not None:
                out = min(out, ceiling)
            if floor is not None:
                out = max(out, floor)
            row[col.name] = out.isoformat()

    def value(self, col: ColumnDef, row: dict[str, Any], parent: dict[str, Any] | None, n: int) -> Any:
        r, g = self.rng, col.gen
        if g is None:
            if col.ref:
                if col.nullable and r.random() < 0.4:
                    return None
                return r.choice(self._ids(col.ref))
            raise KeyError("no generator")
        if isinstance(g, str):
            out = self._named(g)
            if out is None:
                raise KeyError(f"unknown generator '{g}'")
            return out
        if not isinstance(g, dict) or len(g) < 1:
            raise KeyError(f"generator must be a name or a mapping, got {g!r}")
        kind = next(iter(g))
        arg = g[kind]
        if kind == "choice":
            return r.choices(arg, weights=g.get("weights"))[0]
        if kind == "seq":
            return arg[(n - 1) % len(arg)]
        if kind == "brief_list":
            items = getattr(self.spec.brief, arg)
            return items[(n - 1) % len(items)]
        if kind == "code":
            return numbered(arg, n)
        if kind == "bool":
            return 1 if r.random() < arg else 0
        if kind == "const":
            return arg
        if kind == "int":
            return r.randint(arg[0], arg[1])
        if kind in ("money", "number"):
            return round(r.uniform(arg[0], arg[1]), 2)
        if kind == "days_ago":
            return (self.clock - timedelta(days=r.randint(arg[1], arg[0]))).isoformat()
        if kind == "days_around":
            return (self.clock + timedelta(days=r.randint(-arg[0], arg[1]))).isoformat()
        if kind == "date_after":
            base = date.fromisoformat(self._ref_value(arg, row, parent))
            lo, hi = g.get("days", [0, 30])
            if g.get("cap", True) and lo <= (self.clock - base).days < hi:
                hi = (self.clock - base).days  # drawn within the clock, not clamped: no pile of dates on today
            out = base + timedelta(days=r.randint(lo, hi))
            if g.get("cap", True):
                out = max(base, min(out, self.clock))
            return out.isoformat()
        if kind == "fraction_of":
            lo, hi = g.get("range", [0.5, 1.0])
            return round(float(self._ref_value(arg, row, parent)) * r.uniform(lo, hi), 2)
        if kind == "copy":
            return self._ref_value(arg, row, parent)
        if kind == "email_from":
            local = re.sub(r"[^a-z]+", ".", str(row[arg]).lower()).strip(".")
            return f"{local}@{r.choice(EMAIL_DOMAINS)}"
        if kind == "id_of":
            return r.choice(self._ids(arg))
        if kind == "template":
            return self._template(arg, n)
        raise KeyError(f"unknown generator '{kind}'")


def draw_value(spec: WorldSpec, vocab: Vocabulary, rng: random.Random, col: ColumnDef, row: dict[str, Any],
               n: int) -> Any:
    """One value for a column as its seed generator draws it, for a record a task creates (a name from
    the vocabulary, the next code ``n``, an email from the row's name): KeyError when the generator
    needs what a task does not have (another table's ids, a parent row)."""
    return _normalise(col, _Gen(spec, vocab, rng).value(col, row, None, n))


def _normalise(col: ColumnDef, value: Any) -> Any:
    if value is None:
        return None
    if col.type == "boolean":
        return 1 if value in (True, 1, "true") else 0
    if col.type in ("money", "number"):
        return round(float(value), 2)
    if col.type == "integer":
        return int(value)
    return value


def _when_holds(col: ColumnDef, row: dict[str, Any]) -> bool:
    return all(row.get(k) in vals for k, vals in (col.when or {}).items())


def _make_row(gen: _Gen, table: TableDef, n: int, parent: dict[str, Any] | None,
              unique_seen: dict[str, set[Any]], fitter: Fitter | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"id": n}
    fitted = fitter.by_target.get(table.name, set()) if fitter is not None else set()
    plain = [c for c in table.columns if not c.when]
    conditional = [c for c in table.columns if c.when]
    for col in plain + conditional:
        if table.per_parent and col.name == table.per_parent.column and parent is not None:
            row[col.name] = parent["id"]
            continue
        if col.when and not _when_holds(col, row):
            row[col.name] = None
            continue
        try:
            for _ in range(UNIQUE_TRIES):
                value = _normalise(col, gen.value(col, row, parent, n))
                if not col.unique or value not in unique_seen[col.name]:
                    break
            else:
                raise TemplateError(
                    f"table '{table.name}' column '{col.name}': could not draw a unique value; "
                    f"widen the generator or lower the row count"
                )
        except KeyError as exc:
            raise TemplateError(f"table '{table.name}' column '{col.name}': bad generator: {exc}") from exc
        if col.unique:
            unique_seen[col.name].add(value)
        row[col.name] = value
        if col.name in fitted:  # fit now, so columns drawn from this one (fraction_of, copy) follow it
            fitter.fit_row(table, row, col.name)  # type: ignore[union-attr]
    if fitter is not None and table.name in fitter.plans:
        fitter.fit_row(table, row)  # those whose inputs came later (a contact drawn after its account)
    gen.keep_dates(table, row, parent, plain + conditional)  # once the row's status and references are known
    if fitter is not None:
        fitter.fit_clock(table, row)  # values that follow the clock read the kept dates
    return row


def _acting_user_active(table: TableDef, rows: list[dict[str, Any]]) -> None:
    """The acting user (ACTOR_ID, the tools' $actor) is on staff: drawn inactive, a world's tasks that assign
    work to the agent (take a ticket) would hand it to inactive staff and be refused. Set after the draw, so
    the draws, and every other row, stay as they were."""
    if table.name == "users" and rows and rows[0]["id"] == ACTOR_ID and "active" in rows[0]:
        rows[0]["active"] = 1


def _rule_rows(spec: WorldSpec) -> list[dict[str, Any]]:
    return [
        {"id": i, "name": rule.name, "label": rule.label, "value": spec.brief.rules[rule.name],
         "description": rule.description or rule.label, "owner_id": 1}
        for i, rule in enumerate(spec.rules, start=1)
    ]


def row_bound_problems(spec: WorldSpec) -> list[str]:
    """A table past MAX_TABLE_ROWS or a world past MAX_WORLD_ROWS (see most_rows) is refused before any row
    is made, naming the table's field and the bound."""
    most = most_rows(spec.tables, spec.brief.scale, len(spec.rules))
    problems: list[str] = []
    for table in spec.tables:
        if table.fill or most[table.name] <= MAX_TABLE_ROWS:
            continue
        if table.per_parent is not None:
            pp = table.per_parent
            problems.append(f"table '{table.name}': field 'per_parent.count' {list(pp.count)} gives up to "
                            f"{most[table.name]:,} rows ({most.get(pp.table, 0):,} '{pp.table}' rows times "
                            f"{pp.count[1]}); a table has at most {MAX_TABLE_ROWS:,}")
        else:
            problems.append(f"table '{table.name}': field 'rows' {table.rows:,} at scale {spec.brief.scale} "
                            f"gives {most[table.name]:,} rows; a table has at most {MAX_TABLE_ROWS:,}")
    total = world_rows_problem(most)
    return problems + ([total] if total else [])


def generate_rows(spec: WorldSpec, vocab: Vocabulary, fit: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows, in foreign-key order, from the generation seed; with `fit`, moved into the tables'
    constraints (worldfactory/constraints.py) as they are drawn, totals once their lines are made."""
    problems = row_bound_problems(spec)
    if problems:
        raise TemplateError(f"domain pack '{spec.brief.domain}' (domains/{spec.brief.domain}.yaml or a module it "
                            f"composes): " + "; ".join(problems))
    gen = _Gen(spec, vocab, stage_rng(spec.brief.generation_seed, "data"))
    out: dict[str, list[dict[str, Any]]] = {}
    fitter = Fitter(spec, gen.rng, out) if fit and any(t.constraints for t in spec.tables) else None
    for table in spec.tables:
        unique_seen: dict[str, set[Any]] = {c.name: set() for c in table.columns if c.unique}
        rows: list[dict[str, Any]] = []
        if table.fill == "rules":
            rows = _rule_rows(spec)
        elif table.fill == "handbook":
            rows = []  # written after the rest (generate/handbook.py): it names the staff who review
        elif table.per_parent is not None:
            pp = table.per_parent
            parents = [p for p in out[pp.table] if all(p.get(k) in v for k, v in pp.where.items())]
            for parent in parents:
                for _ in range(gen.rng.randint(*pp.count)):
                    rows.append(_make_row(gen, table, len(rows) + 1, parent, unique_seen, fitter))
        else:
            count = table_rows(table, spec.brief.scale)
            rows = [_make_row(gen, table, n, None, unique_seen, fitter) for n in range(1, count + 1)]
            _acting_user_active(table, rows)
        out[table.name] = rows
        gen.ids[table.name] = [r["id"] for r in rows]
        origin = origin_column(table)
        if origin:
            gen.origins[table.name] = {r["id"]: r[origin] for r in rows if r.get(origin)}
    if fitter is not None:
        fitter.fit_totals()
    return out


def build_seed_db(spec: WorldSpec, vocab: Vocabulary, fit: bool = True) -> bytes:
    """Generate the seed database and return its bytes (deterministic for a given seed); `fit=False` leaves
    rows as drawn, for measuring what the constraints fix (bench/realism_bench.py)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.executescript(schema_sql(spec))
        rows = generate_rows(spec, vocab, fit)
        conn.execute("BEGIN")
        for table in spec.tables:
            cols = ["id"] + [c.name for c in table.columns]
            sql = f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
            try:
                conn.executemany(sql, [[r[c] for c in cols] for r in rows[table.name]])
            except sqlite3.IntegrityError as exc:
                raise SeedDataError(f"table '{table.name}': generated rows break a constraint: {exc}") from exc
        packsql.with_clock(conn, spec.brief.clock)
        for i, stmt in enumerate(spec.derive):
            packsql.run(conn, stmt, "derive", f"domains/{spec.brief.domain}.yaml: field 'derive[{i}]'")
        from .handbook import seed_handbook  # these read the generated rows back
        from .inbox import seed_inbox
        from .twins import seed_twins

        seed_twins(spec, vocab, conn)
        seed_handbook(spec, conn)
        seed_inbox(spec, conn)  # the requests that arrive by email, from their own stream
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        return conn.serialize()
    finally:
        conn.close()


def open_image(image: bytes) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.deserialize(image)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def invariant_field(spec: WorldSpec, inv: SourcedInvariant) -> str:
    """Where an invariant of the spec was written, for messages: its pack file and field."""
    if inv.source:
        return f"invariant '{inv.name}' ({inv.source})"
    return (f"invariant '{inv.name}' (field 'invariants[].sql' of domains/{spec.brief.domain}.yaml or of a module "
            f"it composes: {', '.join(spec.brief.modules)})")  # a spec written before invariants kept their source


def check_seed(spec: WorldSpec, image: bytes) -> dict[str, Any]:
    """The seed stage's proof: integrity, foreign keys, CHECKs, declared invariants and the realism audit
    (worldfactory/audit.py: dates keep to the clock and to the records they belong to) hold."""
    conn = open_image(image)
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            raise SeedDataError(f"integrity_check: {integrity}")
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            raise SeedDataError(f"foreign_key_check found {len(fk)} broken references, first: {fk[0]}")
        # CHECKs run on every write: rewriting each row in place re-asserts all of them.
        conn.execute("SAVEPOINT recheck")
        for table in spec.tables:
            cols = ", ".join(c.name for c in table.columns)
            try:
                conn.execute(f"UPDATE {table.name} SET ({cols}) = ({cols})")
            except sqlite3.IntegrityError as exc:
                raise SeedDataError(f"table '{table.name}': a CHECK constraint fails: {exc}") from exc
        conn.execute("ROLLBACK TO recheck")
        conn.execute("RELEASE recheck")
        for inv in spec.invariants:
            where = invariant_field(spec, inv)
            rows = packsql.run(conn, inv.sql, "invariant", where)
            bad = rows[0][0] if rows and rows[0] else 0
            if bad:
                raise SeedDataError(f"{where} fails for {bad} rows")
        audit = audit_db(spec, conn, invariants=False)  # just checked, each with its own message
        if audit.violations:
            shown = "; ".join(f"{v.rule}: {v.table} row {v.row}: {v.detail}" for v in audit.violations[:3])
            raise SeedDataError(f"realism audit: {len(audit.violations)} dates or constraints break the world's clock, "
                                f"the order of its records or the constraints its tables declare "
                                f"({audit.by_rule()}), first: {shown}; declare a column's date_meaning (event, "
                                f"plan, period), draw its dates after its parent's and at or before the clock, "
                                f"or draw values that keep the table's constraints")
        counts = {t.name: conn.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in spec.tables}
    finally:
        conn.close()
    return {"rows": sum(counts.values()), "row_counts": counts, "invariants": len(spec.invariants),
            "audit_violations": len(audit.violations), "audit_checked_rows": audit.checked_rows}

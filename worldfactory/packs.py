"""Cross-reference checks for domain packs, shared modules and company types, and the pack format's schema.

The pydantic models (worldfactory/spec.py) check each file's shape; this module checks what one part
of a pack says about another: a transition's statuses are in its workflow column's enum, an
`otherwise` names a transition of the same workflow, a guard's rule is declared, `$param` and
`row.<column>` references resolve, effects create rows in tables that exist with every required
column, `per_parent` links and `ref`s (of columns and of transition parameters) point at real
tables. Every problem is one line `<file>: field '<path>': <what is wrong>`, the path written as
unknown keys are (tables[2:claims].workflow.transitions[3:approve_claim].otherwise).
"""

from __future__ import annotations

import builtins
import keyword
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Annotated, Any

from pydantic import Tag, TypeAdapter

from worldfactory.constraints import check_pack_constraints
from worldfactory.expressions import is_expression, references
from worldfactory.fill import fill
from worldfactory.packsql import refusal, with_clock
from worldfactory.spec import (
    NAME_PATTERN,
    ColumnDef,
    CompanyType,
    DomainPack,
    LimitC,
    Module,
    Param,
    TableDef,
    Transition,
    has_name,
)

ANCHOR = "$anchor"
NAME_RE = re.compile(NAME_PATTERN)
RESERVED_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_")) | frozenset(keyword.kwlist)
SPECIAL_VALUES = ("$today", "$actor")  # usable in `set`, effects and create_defaults
CODE_VALUE = "$code"  # in effects and create_defaults: the next code of the column's `code` generator
KINDS = {"domains": DomainPack, "modules": Module, "company_types": CompanyType}


@dataclass
class Scope:
    """What one file's references may name: tables (by name) and policy rules."""

    tables: dict[str, TableDef]
    rules: set[str]
    anchor: str | None  # the domain's core table; None in a module (any domain's anchor)
    where: str  # "in this pack and its modules", for messages


@dataclass
class Report:
    path: Path
    lines: list[str] = field(default_factory=list)

    def add(self, loc: str, msg: str) -> None:
        self.lines.append(f"{self.path}: field '{loc}': {msg}")


def slug(text: str) -> str:
    """As worldfactory.generate.workflow.slug: how tool names are made from a table's singular."""
    return text.lower().replace(" ", "_").replace("-", "_")


def _known(names: Iterable[str]) -> str:
    items = sorted(set(names))
    return ", ".join(items) if items else "none"


def _enum_values(rep: Report, loc: str, table: str, columns: dict[str, Any], wanted: dict[str, Any],
                 missing: str) -> None:
    """Column -> values pairs (`when`, `per_parent.where`): each column must exist, each value be in its enum."""
    for key, values in wanted.items():
        if key not in columns:
            rep.add(f"{loc}.{key}", fill(missing, key=key))
        elif columns[key].enum:
            for v in values:
                if v not in columns[key].enum:
                    rep.add(f"{loc}.{key}", f"'{v}' is not a value of {table}.{key}; "
                            f"known: {', '.join(columns[key].enum)}")


def _table_ref(rep: Report, loc: str, name: str, scope: Scope, what: str) -> TableDef | None:
    """Check that `name` is a table this file can reach; return its definition when known."""
    if name == ANCHOR:
        return scope.tables.get(scope.anchor) if scope.anchor else None
    if name not in scope.tables:
        rep.add(loc, f"{what} '{name}' is not a table {scope.where}; known: {_known(scope.tables)}")
        return None
    return scope.tables[name]


def _check_reads(rep: Report, loc: str, text: str, t: TableDef, tr: Transition | None, scope: Scope | None) -> None:
    """An expression (worldfactory/expressions.py): it parses, and what it reads exists: row.<column> a column,
    param.<name> a parameter of the step, ref.<column>.<name> a `ref` column and a column of the table it points at."""
    from worldfactory.expressions import ExpressionError

    try:
        reads = references(text) if is_expression(text) else [tuple(text.split(".", 1))]
    except ExpressionError as exc:
        rep.add(loc, f"'{text}': {exc}")
        return
    cols = {c.name: c for c in t.columns}
    pnames = [p.name for p in tr.params] if tr else []
    for kind, name in reads:
        if kind == "row" and name not in cols:
            rep.add(loc, f"'{text}': table '{t.name}' has no column '{name}'; known: {_known(cols)}")
        elif kind == "param" and name not in pnames:
            rep.add(loc, f"'{text}': transition '{tr.name if tr else ''}' has no parameter '{name}'; "
                    f"known: {_known(pnames)}")
        elif kind == "ref":
            column, _, field = name.partition(".")
            refs = [c.name for c in t.columns if c.ref]
            target = scope.tables.get(cols[column].ref or "") if scope and column in cols else None
            if column not in refs:
                rep.add(loc, f"'{text}': 'ref.{column}' reads through a column of '{t.name}' that is a `ref` to "
                        f"another table; its ref columns: {_known(refs)}")
            elif target is not None and field not in {c.name for c in target.columns}:
                rep.add(loc, f"'{text}': table '{target.name}' (that {column} points at) has no column '{field}'; "
                        f"known: {_known(c.name for c in target.columns)}")


def _check_value(rep: Report, loc: str, value: Any, t: TableDef, tr: Transition | None, allow_id: bool,
                 column: ColumnDef | None = None, scope: Scope | None = None) -> None:
    """A value written by a transition or a create tool: $today, $actor, $id, $<param>, row.<column>, $code
    (the next code of the written column's own `code` generator), {calc: <expression>}, {date_after: <date>,
    days: <N or rule>}, a literal."""
    from worldfactory.spec import DATE_AFTER, calc_of

    if isinstance(value, dict) and DATE_AFTER in value:
        _check_date_after(rep, loc, value, t, tr, column, scope)
        return
    if isinstance(value, dict) and "calc" in value:
        text = calc_of(value)
        if tr is None:
            rep.add(loc, "a computed value {calc: ...} belongs to a transition's `set` or effects, not a create tool")
            return
        if text is None:
            rep.add(loc, "a computed value is {calc: \"<expression>\"} and nothing else")
            return
        _check_reads(rep, loc, text, t, tr, scope)
        if column is not None and column.type not in ("integer", "number", "money"):
            rep.add(loc, f"a computed value is a number; column '{column.name}' is {column.type}")
        return
    if isinstance(value, dict):
        rep.add(loc, "a written value is $today, $actor, $<param>, row.<column>, a literal, {calc: \"<expression>\"} "
                "or {date_after: <date>, days: <N or rule>}")
        return
    if not isinstance(value, str):
        return
    if value == CODE_VALUE and column is not None and not (tr and any(p.name == "code" for p in tr.params)):
        gen = column.gen  # kept as written: a name or a one-kind mapping
        if not isinstance(gen, dict) or "code" not in gen:
            rep.add(loc, f"'{CODE_VALUE}' gives the next code of a column whose gen is {{code: ...}}; "
                    f"'{column.name}' has no code generator")
        return
    if value.startswith("$"):
        if value in SPECIAL_VALUES or value == ANCHOR or (allow_id and value == "$id"):
            return
        params = [p.name for p in tr.params] if tr else []
        if value[1:] not in params:
            allowed = [*SPECIAL_VALUES, *(["$id"] if allow_id else []), *(f"${p}" for p in params)]
            rep.add(loc, f"unknown reference '{value}'; use one of: {', '.join(allowed)}"
                    + ("" if tr else " (a create tool has no parameters to refer to)"))
    elif value.startswith("row."):
        col = value[4:]
        cols = [c.name for c in t.columns]
        if col not in cols:
            rep.add(loc, f"'{value}': table '{t.name}' has no column '{col}'; known: {_known(cols)}")


def _check_date_after(rep: Report, loc: str, value: dict[str, Any], t: TableDef, tr: Transition | None,
                      column: ColumnDef | None, scope: Scope | None) -> None:
    """A relative date {date_after: <date>, days: <N or rule>} (issue 31: an issued invoice is due in 30 days):
    the date is $today, row.<date column> or $<date parameter>; days a whole number or a declared rule; it
    writes a date column, with days inside that column's own `date_after` draw so tool-written rows look seeded."""
    from worldfactory.spec import date_after_of

    shape = "a relative date is {date_after: <$today, row.<date column> or $<date parameter>>, days: <N or rule>}"
    relative = date_after_of(value)
    if relative is None:
        rep.add(loc, f"{shape}; got {value}")
        return
    start, days = relative
    if tr is None and start != "$today":  # a create tool's default: the new row has no dates, the tool no params
        rep.add(f"{loc}.date_after", f"a create tool's default counts from $today (the new row has no dates yet); "
                f"got '{start}'")
        return
    cols = {c.name: c for c in t.columns}
    params = {p.name: p for p in tr.params} if tr is not None else {}
    if start.startswith("row."):
        if cols.get(start[4:]) is None or cols[start[4:]].type != "date":
            rep.add(f"{loc}.date_after", f"'{start}': table '{t.name}' has no date column '{start[4:]}'; its date "
                    f"columns: {_known(c.name for c in t.columns if c.type == 'date')}")
    elif start.startswith("$") and start != "$today":
        if params.get(start[1:]) is None or params[start[1:]].type != "date":
            rep.add(f"{loc}.date_after", f"'{start}': transition '{tr.name}' has no date parameter '{start[1:]}'; "
                    f"its date parameters: {_known(p.name for p in tr.params if p.type == 'date')}")
    elif start != "$today":
        rep.add(f"{loc}.date_after", f"{shape}; got '{start}'")
    if isinstance(days, str) and scope is not None and days not in scope.rules:
        rep.add(f"{loc}.days", f"'{days}' is neither a whole number of days nor a rule; rules declared "
                f"{scope.where}: {_known(scope.rules)}")
    if column is None:
        return
    if column.type != "date":
        rep.add(loc, f"a relative date writes a date column; '{column.name}' is {column.type}")
        return
    gen = column.gen if isinstance(column.gen, dict) else {}
    drawn = gen.get("days") if "date_after" in gen else None
    if isinstance(days, int) and isinstance(drawn, list) and len(drawn) == 2 and not drawn[0] <= days <= drawn[1]:
        rep.add(f"{loc}.days", f"{days} days is outside the {drawn} days that seeded rows of '{column.name}' are "
                f"drawn with; tool-written and seeded rows would differ")


def _literal_problem(c: ColumnDef, v: Any) -> str | None:
    """Why a literal generated value does not fit its column, or None."""
    if v is None:
        return None if c.nullable else "null in a column that is not nullable"
    if c.enum and v not in c.enum and v != ANCHOR:
        return f"{v!r} is not in the column's enum: {', '.join(c.enum)}"
    if c.type in ("integer", "number", "money") and (isinstance(v, bool) or not isinstance(v, int | float)):
        return f"{v!r} is not a number ({c.type} column)"
    if c.type == "boolean" and v not in (True, False, 0, 1):
        return f"{v!r} is not a boolean"
    if c.type == "date":
        try:
            date.fromisoformat(str(v))
        except ValueError:
            return f"{v!r} is not an ISO date (YYYY-MM-DD)"
    return None


def _check_sql(rep: Report, tables: dict[str, TableDef], anchor: str | None, items: list[tuple[str, str]]) -> None:
    """Compile each statement (EXPLAIN runs nothing) against the tables this file can reach, then hold it
    to what pack SQL may do (worldfactory.packsql: the authorizer refuses ATTACH, PRAGMA, VACUUM INTO, ...)."""
    if not items:
        return
    conn = sqlite3.connect(":memory:")
    try:
        for t in tables.values():
            cols = ", ".join(["id INTEGER PRIMARY KEY", *(f'"{c.name}"' for c in t.columns)])
            conn.execute(f'CREATE TABLE "{t.name}" ({cols})')
        for loc, sql in items:
            text = sql.replace(ANCHOR, anchor) if anchor else sql
            if loc.startswith("derive"):  # a derive may read the clock; an invariant holds on any day
                with_clock(conn, "2000-01-01")
            try:
                conn.execute("EXPLAIN " + text)
            except sqlite3.Error as exc:
                rep.add(loc, f"SQL does not compile against the pack's tables: {exc}")
                continue
            why = refusal(conn, text, "derive" if loc.startswith("derive") else "invariant")
            if why:
                rep.add(loc, why)
    finally:
        conn.close()


def _check_columns(rep: Report, base: str, t: TableDef, scope: Scope) -> None:
    names = {c.name: c for c in t.columns}
    parent = None
    if t.per_parent is not None:
        parent = scope.tables.get(scope.anchor) if t.per_parent.table == ANCHOR and scope.anchor else \
            scope.tables.get(t.per_parent.table)
    for j, c in enumerate(t.columns):
        loc = f"{base}.columns[{j}:{c.name}]"
        if c.name in RESERVED_NAMES:
            rep.add(f"{loc}.name", f"'{c.name}' is a Python name the generated tools cannot take as an argument; "
                    f"rename the column (e.g. '{t.singular.replace(' ', '_')}_{c.name}')")
        if c.ref is not None:
            _table_ref(rep, f"{loc}.ref", c.ref, scope, "ref")
        if c.poly_ref is not None and c.poly_ref not in names:
            rep.add(f"{loc}.poly_ref", f"no column '{c.poly_ref}' in table '{t.name}'")
        _enum_values(rep, f"{loc}.when", t.name, names, c.when or {}, f"no column '{{key}}' in table '{t.name}'")
        if c.gen is None:
            if c.ref is None and c.name != (t.per_parent.column if t.per_parent else None) and t.fill is None:
                rep.add(f"{loc}.gen", "a column needs a generator (gen) unless it is a ref")
            continue
        g = c.gen
        if isinstance(g, dict):
            kind = next(iter(g))
            arg = g[kind]
            if kind in ("date_after", "fraction_of", "copy", "email_from"):
                if isinstance(arg, str) and arg.startswith("parent."):
                    if t.per_parent is None:
                        rep.add(f"{loc}.gen.{kind}", f"'{arg}' needs a per_parent table; '{t.name}' has none")
                    elif parent is not None and arg[7:] not in {x.name for x in parent.columns}:
                        rep.add(f"{loc}.gen.{kind}", f"'{arg}': parent table '{parent.name}' has no column "
                                f"'{arg[7:]}'")
                elif arg not in names:
                    rep.add(f"{loc}.gen.{kind}", f"no column '{arg}' in table '{t.name}'")
                elif arg == c.name:
                    rep.add(f"{loc}.gen.{kind}", "a column cannot be generated from itself")
            elif kind == "id_of":
                _table_ref(rep, f"{loc}.gen.id_of", arg, scope, "id_of")
            elif kind in ("choice", "seq", "const"):
                for v in arg if kind != "const" else [arg]:
                    problem = _literal_problem(c, v)
                    if problem:
                        rep.add(f"{loc}.gen.{kind}", problem)
                        break
            elif kind == "code" and c.unique and "{n" not in arg:
                rep.add(f"{loc}.gen.code", f"a unique column's code needs {{n}} (the row number), got '{arg}'")


def _check_per_parent(rep: Report, base: str, t: TableDef, scope: Scope) -> None:
    pp = t.per_parent
    if pp is None:
        return
    loc = f"{base}.per_parent"
    parent = _table_ref(rep, f"{loc}.table", pp.table, scope, "per_parent table")
    link = next((c for c in t.columns if c.name == pp.column), None)
    if link is None:
        rep.add(f"{loc}.column", f"no column '{pp.column}' in table '{t.name}'; known: "
                f"{_known(c.name for c in t.columns)}")
    elif link.ref != pp.table:
        rep.add(f"{loc}.column", f"column '{pp.column}' must be a ref to '{pp.table}' "
                f"(it is {'a ref to ' + repr(link.ref) if link.ref else 'not a ref'})")
    if parent is not None:
        pcols = {c.name: c for c in parent.columns}
        _enum_values(rep, f"{loc}.where", parent.name, pcols, pp.where,
                     f"parent table '{parent.name}' has no column '{{key}}'")
    if pp.count[0] < 0 or pp.count[0] > pp.count[1]:
        rep.add(f"{loc}.count", f"count is [fewest, most] with 0 <= fewest <= most, got {list(pp.count)}")


def _check_transition(rep: Report, loc: str, t: TableDef, tr: Transition, enum: list[str] | None,
                      names: list[str], scope: Scope) -> None:
    cols = {c.name for c in t.columns}
    if enum is not None:
        for m, state in enumerate(tr.from_):
            if state not in enum:
                rep.add(f"{loc}.from[{m}]", f"status '{state}' is not in the enum of {t.name}.{t.workflow.column}: "
                        f"{', '.join(enum)}")
        if tr.to not in enum:
            rep.add(f"{loc}.to", f"status '{tr.to}' is not in the enum of {t.name}.{t.workflow.column}: "
                    f"{', '.join(enum)}")
    if tr.otherwise is not None:
        if tr.otherwise == tr.name:
            rep.add(f"{loc}.otherwise", "a transition cannot be its own 'otherwise'")
        elif tr.otherwise not in names:
            rep.add(f"{loc}.otherwise", f"no transition '{tr.otherwise}' in the workflow of '{t.name}'; "
                    f"known: {_known(names)}")
        if not tr.guards:
            rep.add(f"{loc}.otherwise", "'otherwise' is taken when a guard fails, and this transition has no guards")
    pnames = [p.name for p in tr.params]
    for n, p in enumerate(tr.params):
        ploc = f"{loc}.params[{n}:{p.name}]"
        if pnames.count(p.name) > 1:
            rep.add(f"{ploc}.name", f"parameter '{p.name}' is declared twice")
        if p.name in RESERVED_NAMES:
            rep.add(f"{ploc}.name", f"'{p.name}' is a Python name the generated tool cannot take as an argument; "
                    "rename the parameter")
        if p.task_value is not None and p.task_value != "choice":
            if not p.task_value.startswith("row."):
                rep.add(f"{ploc}.task_value", f"'{p.task_value}' must be 'choice' or 'row.<column>'")
            elif p.task_value[4:] not in cols:
                rep.add(f"{ploc}.task_value", f"'{p.task_value}': table '{t.name}' has no column '{p.task_value[4:]}'")
        if p.ref is not None:
            _check_ref_param(rep, ploc, p, scope)
        elif (p.task_value or "choice") == "choice" and not p.enum and not p.free_text and p.type != "text":
            rep.add(f"{ploc}.task_value", "a non-text parameter without an enum needs task_value 'row.<column>'")
    for n, g in enumerate(tr.guards):
        gloc = f"{loc}.guards[{n}]"
        _check_reads(rep, f"{gloc}.field", g.field, t, tr, scope)
        if g.rule is not None and g.rule not in scope.rules:
            rep.add(f"{gloc}.rule", f"unknown rule '{g.rule}'; rules declared {scope.where}: {_known(scope.rules)}")
        if isinstance(g.value, str) and g.value.startswith("row.") and g.value[4:] not in cols:
            rep.add(f"{gloc}.value", f"'{g.value}': table '{t.name}' has no column '{g.value[4:]}'")
        elif g.value == "$today":  # the world's clock: a date column's guard ("row.due_on < $today")
            field = g.field[4:] if g.field.startswith("row.") else None
            if field not in cols or t.column(field).type != "date":
                rep.add(f"{gloc}.value", f"'$today' compares with a date column ('row.<date column>'); "
                        f"'{g.field}' is not one")
        elif isinstance(g.value, str) and g.value.startswith("$"):
            rep.add(f"{gloc}.value", f"'{g.value}': a guard compares with a rule, a number, 'row.<column>' or "
                    f"'$today'")
    _check_rule_kept(rep, loc, t, tr)
    for key, value in tr.set.items():
        if key not in cols:
            rep.add(f"{loc}.set.{key}", f"table '{t.name}' has no column '{key}'; known: {_known(cols)}")
        _check_value(rep, f"{loc}.set.{key}", value, t, tr, allow_id=False,
                     column=t.column(key) if key in cols else None, scope=scope)
    for n, e in enumerate(tr.effects):
        eloc = f"{loc}.effects[{n}]"
        kind = "create" if e.create is not None else "update"
        target = _table_ref(rep, f"{eloc}.{kind}", e.table, scope, "effect table")
        if e.update is not None and target is not None:
            refs = [c.name for c in t.columns if c.ref == target.name]
            if e.ref not in refs:
                rep.add(f"{eloc}.ref", f"'{e.ref}' is not a column of '{t.name}' that is a `ref` to '{target.name}'; "
                        f"those that are: {_known(refs)}")
        if e.when is not None:
            _check_reads(rep, f"{eloc}.when.field", e.when.field, t, tr, scope)
            if isinstance(e.when.value, str):
                _check_reads(rep, f"{eloc}.when.value", e.when.value, t, tr, scope)
        for key, value in e.values.items():
            if target is not None and key not in {c.name for c in target.columns}:
                rep.add(f"{eloc}.values.{key}", f"table '{target.name}' has no column '{key}'; "
                        f"known: {_known(c.name for c in target.columns)}")
            target_col = next((c for c in target.columns if c.name == key), None) if target else None
            _check_value(rep, f"{eloc}.values.{key}", value, t, tr, allow_id=True, column=target_col, scope=scope)
            if e.update is not None and target_col is not None and target_col.enum and isinstance(value, str) \
                    and not value.startswith(("$", "row.")) and value not in target_col.enum:
                rep.add(f"{eloc}.values.{key}", f"'{value}' is not in the enum of {target.name}.{key}: "
                        f"{', '.join(target_col.enum)}")
        if target is not None and e.create is not None:
            missing = [c.name for c in target.columns if not c.nullable and c.name not in e.values]
            if missing:
                rep.add(f"{eloc}.values", f"missing required column(s) of '{target.name}': {', '.join(missing)}")


def _check_ref_param(rep: Report, loc: str, p: Param, scope: Scope) -> None:
    """A parameter that is the id of a row of another table: an integer, into a table the pack reaches whose
    records a person can name (tasks say the record by its label and search for its id)."""
    target = _table_ref(rep, f"{loc}.ref", p.ref or "", scope, "ref")
    if p.type != "integer":
        rep.add(f"{loc}.type", f"a ref parameter holds the id of a row of '{p.ref}', so its type must be "
                f"'integer', got '{p.type}'")
    if p.enum is not None:
        rep.add(f"{loc}.enum", "a ref parameter takes the id of a row; it cannot have an enum")
    if target is not None and not has_name(target):
        rep.add(f"{loc}.ref", f"tasks name the record by its label, so table '{target.name}' needs a unique "
                "`label` that its `search` includes")


def _check_rule_kept(rep: Report, loc: str, t: TableDef, tr: Transition) -> None:
    """A guard that caps a parameter by a rule (`param.amount <= approval_limit`) which the transition writes
    into a column needs the same cap as a `limit` constraint on that column, so the rows the seed draws in
    that status respect the rule the tool enforces (issue 31: a matter settled above the settlement authority
    limit); a pack marks allowed exceptions with the limit's `unless`."""
    limits = {(c.limit, c.rule) for c in t.constraints if isinstance(c, LimitC)}
    for n, g in enumerate(tr.guards):
        if g.rule is None or g.op not in ("<=", "<") or not g.field.startswith("param."):
            continue
        for col, value in tr.set.items():
            if value == f"${g.field[6:]}" and (col, g.rule) not in limits:
                rep.add(f"{loc}.guards[{n}].rule", f"the guard caps {g.field} by '{g.rule}' and the transition "
                        f"sets {col} from it: declare {{limit: {col}, rule: {g.rule}, when: {{"
                        f"{t.workflow.column if t.workflow else 'status'}: [{tr.to}]}}}} on '{t.name}' so seeded "
                        f"rows keep the rule")


def _check_table(rep: Report, base: str, t: TableDef, scope: Scope) -> None:
    if t.rows is not None and t.rows < 1 and t.fill is None:
        rep.add(f"{base}.rows", f"a generated table needs at least one row, got {t.rows}")
    if not NAME_RE.match(slug(t.singular)):
        rep.add(f"{base}.singular", f"'{t.singular}' must be words of letters and digits (tool names are "
                f"made from it: get_{slug(t.singular)})")
    _check_columns(rep, base, t, scope)
    _check_per_parent(rep, base, t, scope)
    cols = {c.name: c for c in t.columns}
    for key, value in t.create_defaults.items():
        if key not in cols:
            rep.add(f"{base}.create_defaults.{key}", f"table '{t.name}' has no column '{key}'")
        _check_value(rep, f"{base}.create_defaults.{key}", value, t, None, allow_id=False, column=cols.get(key))
    if t.create is not None:
        missing = [c for c in cols.values() if not c.nullable and c.name not in t.create
                   and c.name not in t.create_defaults]
        if missing:
            rep.add(f"{base}.create", f"required column(s) neither created nor defaulted (create_defaults): "
                    f"{', '.join(c.name for c in missing)}")
    if t.notify is not None:
        _check_notify(rep, f"{base}.notify", t, cols, scope)
    for loc, msg in check_pack_constraints(t, scope.tables, scope.rules, scope.anchor):
        rep.add(f"{base}.{loc}", msg)
    wf = t.workflow
    if wf is None:
        return
    wloc = f"{base}.workflow"
    enum: list[str] | None = None
    if wf.column not in cols:
        rep.add(f"{wloc}.column", f"no column '{wf.column}' in table '{t.name}'; known: {_known(cols)}")
    elif not cols[wf.column].enum:
        rep.add(f"{wloc}.column", f"the workflow column '{wf.column}' needs an enum of statuses")
    else:
        enum = cols[wf.column].enum
    names = [tr.name for tr in wf.transitions]
    for k, tr in enumerate(wf.transitions):
        loc = f"{wloc}.transitions[{k}:{tr.name}]"
        if names.count(tr.name) > 1:
            rep.add(f"{loc}.name", f"transition '{tr.name}' is declared twice")
        _check_transition(rep, loc, t, tr, enum, names, scope)


def _check_notify(rep: Report, loc: str, t: TableDef, cols: dict[str, ColumnDef], scope: Scope) -> None:
    """`notify` names a ref column, or a path of them (`policy_id.policyholder_id`), ending at a table with
    an `email` column: the party tasks email about a record."""
    at: TableDef | None = t
    for name in (t.notify or "").split("."):
        here = {c.name: c for c in at.columns} if at is not t else cols
        col = here.get(name)
        if col is None:
            rep.add(loc, f"no column '{name}' in table '{at.name}'; known: {_known(here)}")
            return
        if not col.ref:
            rep.add(loc, f"column '{name}' of '{at.name}' is not a ref; notify names refs to the party a record "
                    "concerns")
            return
        at = scope.tables.get(scope.anchor) if col.ref == ANCHOR and scope.anchor else scope.tables.get(col.ref)
        if at is None:
            return  # the ref itself is reported where the column is checked
    if "email" not in {c.name for c in at.columns}:
        rep.add(loc, f"table '{at.name}' (where notify leads) has no 'email' column to write to")


def _check_tables(rep: Report, tables: list[TableDef], scope: Scope) -> None:
    seen: set[str] = set()
    for i, t in enumerate(tables):
        base = f"tables[{i}:{t.name}]"
        if t.name in seen:
            rep.add(f"{base}.name", f"table '{t.name}' is declared twice")
        seen.add(t.name)
        _check_table(rep, base, t, scope)


def _rule_names(rules: Iterable[Any], rep: Report) -> set[str]:
    names: set[str] = set()
    for i, r in enumerate(rules):
        if r.name in names:
            rep.add(f"rules[{i}:{r.name}].name", f"rule '{r.name}' is declared twice")
        names.add(r.name)
    return names


def check_domain(path: Path, domain: DomainPack, modules: dict[str, Module]) -> list[str]:
    rep = Report(path)
    tables: dict[str, TableDef] = {}
    rules = _rule_names(domain.rules, rep)
    for field_name in ("modules", "optional_modules"):
        for i, name in enumerate(getattr(domain, field_name)):
            if name not in modules:
                rep.add(f"{field_name}[{i}]", f"unknown module '{name}'; known: {_known(modules)}")
                continue
            tables.update({t.name: t for t in modules[name].tables})
            rules |= {r.name for r in modules[name].rules}
    own = {t.name for t in domain.tables}
    clash = sorted(own & set(tables))
    if clash:
        rep.add("tables", f"tables also declared by a composed module: {', '.join(clash)}")
    tables.update({t.name: t for t in domain.tables})
    for key in domain.texts:
        name, _, column = key.partition(".")
        where = next((m for m in domain.modules + domain.optional_modules if m in modules
                      and any(t.name == name for t in modules[m].tables)), None)
        col = next((c for c in tables[name].columns if c.name == column), None) if where else None
        if where is None:
            rep.add(f"texts.{key}", f"'{name}' is not a table of a shared module this pack composes; texts give a "
                    f"module's free text this domain's wording")
        elif col is None or col.type != "text" or col.enum:
            rep.add(f"texts.{key}", f"'{column}' is not a free-text column of {name}; known: "
                    f"{_known(c.name for c in tables[name].columns if c.type == 'text' and not c.enum)}")
    if domain.anchor not in own:
        rep.add("anchor", f"no table '{domain.anchor}' in this pack; known: {_known(own)}")
    scope = Scope(tables=tables, rules=rules, anchor=domain.anchor, where="in this pack or its modules")
    _check_tables(rep, domain.tables, scope)
    if not rep.lines:  # SQL is checked once the tables it reads are sound
        sql = [(f"invariants[{i}].sql", inv.sql) for i, inv in enumerate(domain.invariants)]
        sql += [(f"derive[{i}]", stmt) for i, stmt in enumerate(domain.derive)]
        _check_sql(rep, tables, domain.anchor, sql)
    return rep.lines


def check_row_products(path: Path, domain: DomainPack, modules: dict[str, Module], scale: float) -> list[str]:
    """`check-pack`: the rows each table can get as products down per_parent chains, with every module the
    pack may compose, at the largest scale a world of it can have, held to the seed stage's bounds
    (worldfactory/row_bounds.py). Not part of check_set: a pack past them is still loaded, and refused
    by the seed stage of the world that would make the rows."""
    from worldfactory.row_bounds import MAX_TABLE_ROWS, most_rows, world_rows_problem

    rep = Report(path)
    composed = [modules[n] for n in (*domain.modules, *domain.optional_modules) if n in modules]
    tables = [t for m in composed for t in m.tables] + list(domain.tables)
    rule_count = len({r.name for m in composed for r in m.rules} | {r.name for r in domain.rules})
    most = most_rows(tables, scale, rule_count, domain.anchor)
    at = f"at scale {scale:g}, the largest a world of this pack gets"
    for i, t in enumerate(domain.tables):
        if not t.fill and most[t.name] > MAX_TABLE_ROWS:
            pp = t.per_parent
            how = (f"{list(pp.count)} gives up to {most[t.name]:,} rows (per_parent counts multiply down the chain)"
                   if pp is not None else f"{t.rows:,} gives {most[t.name]:,} rows")
            rep.add(f"tables[{i}:{t.name}].{'per_parent.count' if pp is not None else 'rows'}",
                    f"{how} {at}; a table has at most {MAX_TABLE_ROWS:,}")
    for field_name in ("modules", "optional_modules"):
        for i, name in enumerate(getattr(domain, field_name)):
            for t in modules[name].tables if name in modules else []:
                if not t.fill and most[t.name] > MAX_TABLE_ROWS:
                    rep.add(f"{field_name}[{i}]", f"module '{name}' table '{t.name}' gets up to {most[t.name]:,} "
                            f"rows under this pack's tables {at}; a table has at most {MAX_TABLE_ROWS:,}")
    total = world_rows_problem(most)
    if total:
        rep.add("tables", f"{total} ({at}, with every module it may compose)")
    return rep.lines


def undeclared_dates(path: Path, tables: list[TableDef]) -> list[str]:
    """`check-pack`: every date column says what its date means on the world's clock (`date_meaning`), so the
    seed stage, the realism audit and the task families need not guess from its name. Not part of check_set:
    a drafted or older pack without them still loads, its meanings inferred (worldfactory/dates.py)."""
    from worldfactory.dates import date_meaning

    rep = Report(path)
    for i, t in enumerate(tables):
        for j, c in enumerate(t.columns):
            if c.type == "date" and c.date_meaning is None:
                rep.add(f"tables[{i}:{t.name}].columns[{j}:{c.name}].date_meaning",
                        f"a date column needs date_meaning: event (happened: at or before today), plan (may lie "
                        f"ahead: scheduled, expected) or period (a bound: due, ends, expires); its name reads "
                        f"as '{date_meaning(c)}'")
    return rep.lines


def check_module(path: Path, module: Module, modules: dict[str, Module]) -> list[str]:
    rep = Report(path)
    tables = {t.name: t for m in modules.values() if m.name != module.name for t in m.tables}
    tables.update({t.name: t for t in module.tables})
    rules = _rule_names(module.rules, rep)
    scope = Scope(tables=tables, rules=rules, anchor=None, where="in the shared modules")
    _check_tables(rep, module.tables, scope)
    if not rep.lines:
        _check_sql(rep, tables, None, [(f"invariants[{i}].sql", inv.sql) for i, inv in enumerate(module.invariants)])
    return rep.lines


def check_company_type(path: Path, ct: CompanyType, modules: dict[str, Module],
                       domains: dict[str, DomainPack]) -> list[str]:
    rep = Report(path)
    for i, name in enumerate(ct.extra_modules):
        if name not in modules:
            rep.add(f"extra_modules[{i}]", f"unknown module '{name}'; known: {_known(modules)}")
    rules = {r.name for m in modules.values() for r in m.rules} | {r.name for d in domains.values() for r in d.rules}
    for name in ct.rule_factors:
        if name not in rules:
            rep.add(f"rule_factors.{name}", f"no rule '{name}' in any domain pack or module; known: {_known(rules)}")
    return rep.lines


def check_set(root: Path, domains: dict[str, DomainPack], modules: dict[str, Module],
              company_types: dict[str, CompanyType]) -> list[str]:
    """Every cross-reference problem of a templates folder, one line each."""
    lines: list[str] = []
    for name, m in modules.items():
        lines += check_module(root / "modules" / f"{name}.yaml", m, modules)
    for name, d in domains.items():
        lines += check_domain(root / "domains" / f"{name}.yaml", d, modules)
    for name, ct in company_types.items():
        lines += check_company_type(root / "company_types" / f"{name}.yaml", ct, modules, domains)
    return lines + check_names(root, domains, company_types)


def check_names(root: Path, domains: dict[str, DomainPack], company_types: dict[str, CompanyType]) -> list[str]:
    """Company names stay unique across the catalog: one trade word per pack, one set of suffixes per type."""
    lines: list[str] = []
    words: dict[str, str] = {}
    for name in sorted(domains):
        word = domains[name].trade_word.lower()
        if word in words:
            lines.append(f"{root / 'domains' / f'{name}.yaml'}: field 'name_word': '{domains[name].trade_word}' is "
                         f"also the trade word of {words[word]}; give each pack its own")
        words.setdefault(word, name)
    suffixes: dict[str, str] = {}
    for name in sorted(company_types):
        for i, suffix in enumerate(company_types[name].name_suffixes):
            if suffix.lower() in suffixes and suffixes[suffix.lower()] != name:
                lines.append(f"{root / 'company_types' / f'{name}.yaml'}: field 'name_suffixes[{i}]': '{suffix}' is "
                             f"also a suffix of company type {suffixes[suffix.lower()]}; company types need their own")
            suffixes.setdefault(suffix.lower(), name)
    return lines


# --- check-pack and pack-schema -------------------------------------------------------------


def _kind_of(path: Path, data: Any) -> str:
    if path.parent.name in KINDS:
        return path.parent.name
    if isinstance(data, dict) and "anchor" in data:
        return "domains"
    if isinstance(data, dict) and "scale" in data:
        return "company_types"
    return "modules"


def check_files(paths: list[Path], templates: Path | None = None) -> list[str]:
    """Validate pack files without building: shape, then cross-references against the templates
    folder each file sits in (or `templates`, or the project's world_templates/ for a loose file)."""
    from worldfactory.draws import SCALE_SPREAD
    from worldfactory.template_files import DEFAULT_TEMPLATES, TemplateError, _load_dir, _read_yaml, load_model

    lines: list[str] = []
    for path in paths:
        try:
            data = _read_yaml(path)
            kind = _kind_of(path, data)
            item = load_model(path, KINDS[kind])
            if kind in KINDS and item.name != path.stem and path.parent.name == kind:
                raise TemplateError(f"{path}: field 'name': '{item.name}' must match the file name '{path.stem}'")
            root = templates
            if root is None:
                root = path.parent.parent if path.parent.name == kind and (path.parent.parent / "modules").is_dir() \
                    else DEFAULT_TEMPLATES
            modules = _load_dir(root / "modules", Module)
            if kind == "modules":
                modules[item.name] = item
                lines += check_module(path, item, modules) or undeclared_dates(path, item.tables)
            elif kind == "domains":
                found = check_domain(path, item, modules)
                if not found:
                    types = _load_dir(root / "company_types", CompanyType)
                    scale = max((ct.scale for ct in types.values()), default=1.0) * SCALE_SPREAD[1]
                    found = check_row_products(path, item, modules, scale) or undeclared_dates(path, item.tables)
                lines += found
            else:
                lines += check_company_type(path, item, modules, _load_dir(root / "domains", DomainPack))
        except TemplateError as exc:
            lines += str(exc).splitlines()
        except Exception as exc:  # noqa: BLE001 - a pack author gets a line, never a traceback
            lines.append(f"{path}: cannot be checked: {type(exc).__name__}: {exc}")
    return lines


PACK_KINDS = {"domain": DomainPack, "module": Module, "company-type": CompanyType}


def pack_schema(kind: str | None = None) -> dict[str, Any]:
    """The JSON Schema of the pack format: one kind, or any of the three (domain pack, module, company type)."""
    if kind is not None:
        schema = PACK_KINDS[kind].model_json_schema()
    else:
        union = Annotated[DomainPack, Tag("domain")] | Annotated[Module, Tag("module")] | \
            Annotated[CompanyType, Tag("company-type")]
        schema = TypeAdapter(union).json_schema()
        schema["title"] = "WorldFactory template (domain pack, shared module or company type)"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}

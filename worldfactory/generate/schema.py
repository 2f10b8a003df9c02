"""Brief -> WorldSpec and schema.sql (tables, keys, CHECKs, enums).

Module and domain tables are composed, `$anchor` is resolved to the domain's core record, and
tables are ordered so that every foreign key points to an earlier table.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from worldfactory.spec import Brief, ColumnDef, Invariant, SourcedInvariant, TableDef, WorldSpec
from worldfactory.templates import TemplateError, TemplateSet

SQL_TYPES = {
    "integer": "INTEGER",
    "number": "REAL",
    "money": "REAL",
    "text": "TEXT",
    "date": "TEXT",
    "boolean": "INTEGER",
}


class SchemaError(ValueError):
    """The composed schema breaks a rule (dangling reference, cycle, disconnected graph)."""


def _resolve(value: Any, anchor: str) -> Any:
    if isinstance(value, str):
        return anchor if value == "$anchor" else value
    if isinstance(value, dict):
        return {k: _resolve(v, anchor) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, anchor) for v in value]
    return value


def _resolve_table(table: TableDef, anchor: str) -> TableDef:
    """A copy of the table (the spec's own: a caller may change it; the template set is cached and shared) with
    `$anchor` read as the pack's anchor table; validated again only where it names one (a module's few
    tables: validating every table of every world again was most of build_spec's time)."""
    if '"$anchor"' not in table.model_dump_json(by_alias=True):
        return table.model_copy(deep=True)
    return TableDef.model_validate(_resolve(table.model_dump(by_alias=True, exclude_unset=False), anchor))


def _worded(table: TableDef, texts: dict[str, list[str]]) -> TableDef:
    """A shared module's table with the domain's own texts (DomainPack.texts) drawn for its free-text columns."""
    mine = {key.split(".", 1)[1]: values for key, values in texts.items() if key.split(".", 1)[0] == table.name}
    if not mine:
        return table
    columns = [c.model_copy(update={"gen": {"choice": list(mine[c.name])}}) if c.name in mine else c
               for c in table.columns]
    return table.model_copy(update={"columns": columns})


def _order(tables: list[TableDef]) -> list[TableDef]:
    """Topological order by foreign keys, keeping declaration order where free."""
    by_name = {t.name: t for t in tables}
    done: list[TableDef] = []
    seen: set[str] = set()
    visiting: set[str] = set()

    def visit(t: TableDef) -> None:
        if t.name in seen:
            return
        if t.name in visiting:
            raise SchemaError(f"foreign keys form a cycle through '{t.name}'")
        visiting.add(t.name)
        for col in t.columns:
            if col.ref and col.ref != t.name:
                if col.ref not in by_name:
                    raise SchemaError(f"{t.name}.{col.name} references unknown table '{col.ref}'")
                visit(by_name[col.ref])
        visiting.discard(t.name)
        seen.add(t.name)
        done.append(t)

    for t in tables:
        visit(t)
    return done


def sourced(invariants: list[Invariant], pack_file: str) -> list[SourcedInvariant]:
    """A pack's invariants with the file and field each was written at."""
    return [SourcedInvariant(name=inv.name, sql=inv.sql, source=f"{pack_file}: field 'invariants[{i}:{inv.name}].sql'")
            for i, inv in enumerate(invariants)]


def build_spec(brief: Brief, templates: TemplateSet) -> WorldSpec:
    """Compose the domain's core with its modules into one resolved spec."""
    domain = templates.domains[brief.domain]
    anchor = domain.anchor
    tables: list[TableDef] = []
    rules = []
    invariants = []
    for name in brief.modules:
        module = templates.modules[name]
        tables += [_worded(_resolve_table(t, anchor), domain.texts) for t in module.tables]
        rules += module.rules
        invariants += sourced(module.invariants, f"modules/{name}.yaml")
    tables += [_resolve_table(t, anchor) for t in domain.tables]
    rules += domain.rules
    invariants += sourced(domain.invariants, f"domains/{domain.name}.yaml")
    tables = [t for t in tables if t.name not in brief.dropped_tables]

    names = [t.name for t in tables]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise TemplateError(f"domain '{domain.name}': table names defined twice: {', '.join(dupes)}")
    if anchor not in names:
        raise TemplateError(f"{templates.root}/domains/{domain.name}.yaml: field 'anchor': no table '{anchor}'")

    return WorldSpec(
        brief=brief,
        anchor=anchor,
        tables=_order(tables),
        rules=rules,
        invariants=invariants,
        derive=list(domain.derive),
    )


def _column_sql(col: ColumnDef) -> str:
    parts = [col.name, SQL_TYPES[col.type]]
    if not col.nullable:
        parts.append("NOT NULL")
    if col.unique:
        parts.append("UNIQUE")
    checks = []
    if col.enum:
        values = ", ".join("'" + v.replace("'", "''") + "'" for v in col.enum)
        checks.append(f"{col.name} IN ({values})")
    if col.type == "boolean":
        checks.append(f"{col.name} IN (0, 1)")
    if col.type == "date":
        # a real calendar date: date() is NULL for 9999-99-99 ('=' would pass), '+0 days' turns 02-30 into 03-02
        checks.append(f"{col.name} IS date({col.name}, '+0 days')")
    if col.minimum is not None:
        checks.append(f"{col.name} >= {col.minimum:g}")
    if col.maximum is not None:
        checks.append(f"{col.name} <= {col.maximum:g}")
    if col.type in ("text",) and not col.nullable:
        checks.append(f"length({col.name}) > 0")
    if checks:
        parts.append("CHECK (" + " AND ".join(checks) + ")")
    if col.ref:
        parts.append(f"REFERENCES {col.ref}(id)")
    return " ".join(parts)


def schema_sql(spec: WorldSpec) -> str:
    """The DDL for a spec, deterministic text."""
    out = [f"-- schema for {spec.brief.world_id} (generator {spec.brief.generator_version})"]
    for t in spec.tables:
        cols = ["    id INTEGER PRIMARY KEY"] + [f"    {_column_sql(c)}" for c in t.columns]
        out.append(f"CREATE TABLE {t.name} (\n" + ",\n".join(cols) + "\n);")
        for c in t.columns:
            if c.ref or c.poly_ref or (c.enum and t.workflow and t.workflow.column == c.name):
                out.append(f"CREATE INDEX ix_{t.name}_{c.name} ON {t.name}({c.name});")
    return "\n".join(out) + "\n"


def check_schema(spec: WorldSpec, ddl: str) -> dict[str, int]:
    """The schema stage's proof: the DDL loads, names are unique, the FK graph is connected."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(ddl)
        loaded = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table' ORDER BY name")]
    finally:
        conn.close()
    expected = sorted(t.name for t in spec.tables)
    if loaded != expected:
        raise SchemaError(f"DDL created tables {loaded}, expected {expected}")
    graph: dict[str, set[str]] = {t.name: set() for t in spec.tables}
    for t in spec.tables:
        for c in t.columns:
            if c.ref:
                graph[t.name].add(c.ref)
                graph[c.ref].add(t.name)
    start = spec.tables[0].name
    reached = {start}
    frontier = [start]
    while frontier:
        for nxt in graph[frontier.pop()]:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    missing = sorted(set(graph) - reached)
    if missing:
        raise SchemaError(f"foreign-key graph is not connected; unreachable tables: {', '.join(missing)}")
    fks = sum(1 for t in spec.tables for c in t.columns if c.ref)
    return {"tables": len(spec.tables), "foreign_keys": fks}

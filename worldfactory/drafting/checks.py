"""What a model's pack must pass beyond the pack language's own validation: its strings stay data.

Its SQL (invariants, derive) is held to what every pack's is (worldfactory.packsql: one statement
that only reads the world's tables, or only changes their rows, checked by SQLite's authorizer).
Its format strings (`code`, `template`, `verb`) may only name plain fields with a short width: no
attribute or index lookups, no million-character padding. Its sizes are bounded, so a draft cannot
ask for a world that takes hours to build. Every problem is one line
`pack.json: field '<path>': <what is wrong>`, as the pack checks write them.
"""

from __future__ import annotations

import re
import sqlite3
import string
from typing import Any

from worldfactory.briefs import SLUG_RE
from worldfactory.packsql import refusal
from worldfactory.spec import DomainPack, TableDef

PACK_FILE = "pack.json"  # how a drafted pack is named in messages (and in the work folder)
MAX_TABLES = 24
MAX_COLUMNS = 40
MAX_ROWS = 2000  # rows of one table at scale 1.0 (hand-written packs use 10 to 600)
MAX_PER_PARENT = 20
MAX_STRING = 2000
FORMAT_KEYS = ("code", "template", "verb")
FIELD_RE = re.compile(r"^[a-z_][a-z0-9_]*$", re.I)
SPEC_RE = re.compile(r"^0?\d{0,2}d?$")  # e.g. 06d, 4, d, or nothing
def _line(loc: str, msg: str) -> str:
    return f"{PACK_FILE}: field '{loc}': {msg}"


def _check_sql(pack: DomainPack, reachable: dict[str, TableDef], lines: list[str]) -> None:
    conn = sqlite3.connect(":memory:")
    try:
        for t in reachable.values():
            cols = ", ".join(["id INTEGER PRIMARY KEY", *(f'"{c.name}"' for c in t.columns)])
            conn.execute(f'CREATE TABLE "{t.name}" ({cols})')
        for i, inv in enumerate(pack.invariants):
            why = refusal(conn, inv.sql, "invariant")
            if why:
                lines.append(_line(f"invariants[{i}].sql", why))
        for i, stmt in enumerate(pack.derive):
            why = refusal(conn, stmt, "derive")
            if why:
                lines.append(_line(f"derive[{i}]", why))
    finally:
        conn.close()


def _check_formats(node: Any, loc: str, lines: list[str]) -> None:
    """Every `code`, `template` and `verb` string: plain {field} or {field:06d}, nothing else."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{loc}.{key}" if loc else str(key)
            if key in FORMAT_KEYS and isinstance(value, str):
                try:
                    fields = [(f, s, c) for _, f, s, c in string.Formatter().parse(value) if f is not None]
                except ValueError as exc:
                    lines.append(_line(here, f"not a valid format: {exc}"))
                    continue
                for name, spec, conv in fields:
                    if not FIELD_RE.match(name) or conv or not SPEC_RE.match(spec or ""):
                        lines.append(_line(here, f"placeholder {{{name}{'!' + conv if conv else ''}"
                                                 f"{':' + spec if spec else ''}}} is not allowed: use a plain "
                                                 f"name like {{n}} or {{n:06d}}"))
            else:
                _check_formats(value, here, lines)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            name = f":{item['name']}" if isinstance(item, dict) and isinstance(item.get("name"), str) else ""
            _check_formats(item, f"{loc}[{i}{name}]", lines)


def _check_strings(node: Any, loc: str, lines: list[str]) -> None:
    if isinstance(node, str) and len(node) > MAX_STRING:
        lines.append(_line(loc, f"a text of {len(node)} characters; at most {MAX_STRING}"))
    elif isinstance(node, dict):
        for key, value in node.items():
            _check_strings(value, f"{loc}.{key}" if loc else str(key), lines)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _check_strings(item, f"{loc}[{i}]", lines)


def _check_row_products(pack: DomainPack, reachable: dict[str, TableDef], scale: float, lines: list[str]) -> None:
    """The rows each table can get, as products down per_parent chains at the brief's scale, held to the
    bounds the seed stage holds every world to (worldfactory.generate.data): said now, so the model can
    lower them, rather than by a failed build."""
    from worldfactory.row_bounds import MAX_TABLE_ROWS, MAX_WORLD_ROWS, table_rows

    most: dict[str, int] = {}

    def rows(t: TableDef, depth: int = 0) -> int:
        if t.name not in most:
            pp = t.per_parent
            parent = reachable.get(pack.anchor if pp is not None and pp.table == "$anchor" else
                                   pp.table if pp is not None else "")
            if pp is None or parent is None or depth > len(reachable):
                most[t.name] = table_rows(t, scale) if pp is None else 0
            else:
                most[t.name] = rows(parent, depth + 1) * pp.count[1]
        return most[t.name]

    for i, t in enumerate(pack.tables):
        n = rows(t)
        if n > MAX_TABLE_ROWS:
            field = "per_parent.count" if t.per_parent is not None else "rows"
            lines.append(_line(f"tables[{i}:{t.name}].{field}", f"gives up to {n:,} rows at scale {scale:g} "
                                                               f"(per_parent counts multiply down the chain); a "
                                                               f"table has at most {MAX_TABLE_ROWS:,}"))
    total = sum(rows(t) for t in reachable.values())
    if total > MAX_WORLD_ROWS:
        lines.append(_line("tables", f"the tables can get up to {total:,} rows together at scale {scale:g}; a "
                                     f"world has at most {MAX_WORLD_ROWS:,}: lower rows or per_parent counts"))


def check_drafted(pack: DomainPack, data: dict[str, Any], reachable: dict[str, TableDef],
                  taken: set[str], required_rules: dict[str, float], module_rules: set[str],
                  scale: float = 1.0) -> list[str]:
    """The extra checks of a model's pack (see the module docstring); [] when it passes."""
    lines: list[str] = []
    if not SLUG_RE.match(pack.name):
        lines.append(_line("name", f"'{pack.name}' is not a slug (lowercase letters, digits, '-')"))
    elif pack.name in taken:
        lines.append(_line("name", f"'{pack.name}' is a hand-written domain pack's name; choose another"))
    if len(pack.tables) > MAX_TABLES:
        lines.append(_line("tables", f"{len(pack.tables)} tables; a drafted pack has at most {MAX_TABLES}"))
    for i, t in enumerate(pack.tables):
        loc = f"tables[{i}:{t.name}]"
        if len(t.columns) > MAX_COLUMNS:
            lines.append(_line(f"{loc}.columns", f"{len(t.columns)} columns; at most {MAX_COLUMNS}"))
        if t.rows is not None and not 1 <= t.rows <= MAX_ROWS:
            lines.append(_line(f"{loc}.rows", f"{t.rows} rows; a drafted table has 1 to {MAX_ROWS}"))
        if t.per_parent is not None and not 0 <= t.per_parent.count[0] <= t.per_parent.count[1] <= MAX_PER_PARENT:
            lines.append(_line(f"{loc}.per_parent.count", f"{list(t.per_parent.count)}: at most {MAX_PER_PARENT} "
                                                          f"rows per parent, fewest first"))
    declared = {r.name for r in pack.rules} | module_rules
    for name in sorted(required_rules):
        if name not in declared:
            lines.append(_line("rules", f"the brief sets the policy value '{name}'; declare a rule named '{name}'"))
    _check_strings(data, "", lines)
    _check_formats(data, "", lines)
    _check_sql(pack, reachable, lines)
    _check_row_products(pack, reachable, scale, lines)
    return lines

"""The most rows a pack's tables can get, and the bounds a world's rows are held to: counted before any row
is made, by `check-pack` (packs.py check_row_products) and by the seed stage (generate/data.py), so both read
one rule and a hand-written pack hears of a chain that is too big before it is built."""

from __future__ import annotations

from collections.abc import Iterable

from worldfactory.spec import TableDef

UNSCALED_BELOW = 10  # tiny reference tables (roles, departments) keep their declared size
# Bounds on the rows a world can get, counted before any row is made: the catalog's 2,000 worlds reach at
# most 4,764 in one table and 13,670 in all (products down per_parent chains, at their scale).
MAX_TABLE_ROWS = 25_000
MAX_WORLD_ROWS = 60_000


def table_rows(table: TableDef, scale: float) -> int:
    """How many rows a table without a parent gets at this scale."""
    declared = table.rows or 0
    return declared if declared < UNSCALED_BELOW else max(1, round(declared * scale))


def most_rows(tables: Iterable[TableDef], scale: float, rule_count: int, anchor: str | None = None) -> dict[str, int]:
    """The most rows each table can get, as products down per_parent chains (a child gets up to count[1]
    rows for every parent row, whatever its `where`); `$anchor` parents are `anchor`. For the seed stage
    and for `check-pack`, so a hand-written pack hears of a chain that is too big before it is built."""
    by_name = {t.name: t for t in tables}
    most: dict[str, int] = {}

    def rows(t: TableDef, depth: int = 0) -> int:
        if t.name not in most:
            pp = t.per_parent
            if t.fill:  # a handbook has a section per rule and per guarded step: at most two per rule
                most[t.name] = rule_count if t.fill == "rules" else 2 * rule_count
            elif pp is None:
                most[t.name] = table_rows(t, scale)
            else:
                parent = by_name.get(anchor if pp.table == "$anchor" and anchor else pp.table)
                most[t.name] = 0 if parent is None or depth > len(by_name) else rows(parent, depth + 1) * pp.count[1]
        return most[t.name]

    for t in by_name.values():
        rows(t)
    return most


def world_rows_problem(most: dict[str, int]) -> str:
    """Why these tables together are past MAX_WORLD_ROWS, or ''."""
    total = sum(most.values())
    if total <= MAX_WORLD_ROWS:
        return ""
    big = ", ".join(f"{n} {c:,}" for n, c in sorted(most.items(), key=lambda kv: -kv[1])[:3])
    return (f"the tables can get up to {total:,} rows together (largest: {big}); a world has at "
            f"most {MAX_WORLD_ROWS:,}: lower 'rows' or 'per_parent.count'")

"""What generated tool code imports: the ToolDB handle, ToolError and the @tool marker.

Tools never own transactions: the runtime wraps every call in a SAVEPOINT and rolls it back
whole when the tool raises. ToolDB offers reads, checked writes, business rules and the world
clock, and has no commit, rollback or attach.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from typing import Any, TypeVar

from worldfactory.expressions import evaluate
from worldfactory.fill import numbered
from worldfactory.spec import ACTOR_ID

F = TypeVar("F", bound=Callable[..., Any])

OPS = {"=": "=", "contains": "LIKE", ">=": ">=", "<=": "<="}
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


class ToolError(Exception):
    """A domain error the agent should see: unknown record, wrong state, a broken business rule."""


def tool(*, read_only: bool, destructive: bool, idempotent: bool, provenance: str) -> Callable[[F], F]:
    """Marks a generated function as a world tool and records its MCP annotations."""

    def mark(fn: F) -> F:
        fn.__wf_tool__ = {  # type: ignore[attr-defined]
            "read_only": read_only,
            "destructive": destructive,
            "idempotent": idempotent,
            "provenance": provenance,
        }
        return fn

    return mark


def _rows(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


class ToolDB:
    """A tool's view of the episode database."""

    def __init__(self, conn: sqlite3.Connection, clock: str, actor_id: int = ACTOR_ID) -> None:
        self._conn = conn
        self.today = clock
        self.actor = actor_id

    def get(self, table: str, record_id: int, noun: str) -> dict[str, Any]:
        cur = self._conn.execute(f"SELECT * FROM {table} WHERE id = ?", (record_id,))
        row = cur.fetchone()  # the hottest read of every tool: one row, no list around it
        if row is None:
            raise ToolError(f"no {noun} with id {record_id}")
        return dict(zip([d[0] for d in cur.description], row, strict=True))

    def search(self, table: str, filters: Sequence[tuple[str, str, Any]], *, limit: int, offset: int) -> dict[str, Any]:
        """Rows matching every given filter (None means 'any'); text 'contains' is case-insensitive."""
        where: list[str] = []
        params: list[Any] = []
        for column, op, value in filters:
            if value is None:
                continue
            if op == "contains":
                where.append(f"{column} LIKE ? ESCAPE '\\'")
                escaped = str(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                params.append(f"%{escaped}%")
            else:
                where.append(f"{column} {OPS[op]} ?")
                params.append(value)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        total = self._conn.execute(f"SELECT count(*) FROM {table}{clause}", params).fetchone()[0]
        rows = _rows(
            self._conn.execute(f"SELECT * FROM {table}{clause} ORDER BY id LIMIT ? OFFSET ?", [*params, limit, offset])
        )
        more = offset + len(rows) < total
        return {"total": total, "results": rows, "next_offset": offset + len(rows) if more else None}

    def _write(self, sql: str, params: Sequence[Any], table: str) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            text = str(exc)
            if text.startswith("UNIQUE constraint failed"):
                cols = text.split(":", 1)[1].strip()
                raise ToolError(f"another record already has this value ({cols} must be unique)") from exc
            if text.startswith("CHECK constraint failed"):
                raise ToolError(f"a value is outside what {table} allows ({text})") from exc
            if text.startswith("FOREIGN KEY"):
                raise ToolError(f"a referenced record does not exist ({table})") from exc
            raise ToolError(f"the database rejected the change: {text}") from exc

    def insert(self, table: str, values: dict[str, Any]) -> int:
        cols = list(values)
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        cur = self._write(sql, [values[c] for c in cols], table)
        return int(cur.lastrowid or 0)

    def update(self, table: str, record_id: int, values: dict[str, Any]) -> None:
        sets = ", ".join(f"{c} = ?" for c in values)
        self._write(f"UPDATE {table} SET {sets} WHERE id = ?", [*values.values(), record_id], table)

    def calc(self, expression: str, values: dict[str, Any]) -> float | None:
        """A guard's arithmetic (worldfactory.expressions) over the record's and the call's values."""
        row = {k[4:]: v for k, v in values.items() if k.startswith("row.")}
        row.update({k: v for k, v in values.items() if k.startswith("ref.")})  # related reads keep their key
        params = {k[6:]: v for k, v in values.items() if k.startswith("param.")}
        return evaluate(expression, row, params)

    def computed(self, expression: str, values: dict[str, Any], kind: str, what: str) -> float | int:
        """A `{calc: ...}` value of `set` or an effect, as its column stores it (integers whole, money to the cent)."""
        value = self.calc(expression, values)
        if value is None:
            raise ToolError(f"{what} cannot be computed: a value it reads is missing")
        if kind == "integer":
            return int(round(value))
        return round(value, 2) if kind == "money" else value

    def days_after(self, start: Any, days: float) -> str:
        """A `{date_after: ..., days: ...}` value: the date `days` after `start` (the world's clock, never the wall
        clock, or a date of the row or the call), so a due date follows its terms the way seeded rows do."""
        if start is None:
            raise ToolError(f"cannot count {days:g} days after a date that is missing")
        try:
            return (date.fromisoformat(str(start)) + timedelta(days=int(round(days)))).isoformat()
        except (TypeError, ValueError) as exc:
            raise ToolError(f"cannot count {days:g} days after {start!r}: not a YYYY-MM-DD date") from exc

    def holds(self, left: Any, op: str, right: Any) -> bool:
        """Whether an effect's `when` holds (a missing value never does)."""
        return left is not None and right is not None and bool(COMPARE[op](left, right))

    def next_code(self, table: str, pattern: str) -> str:
        """The code the table's next row gets from its `code` generator (numbered by id, as seeded rows are)."""
        row = self._conn.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table}").fetchone()
        return numbered(pattern, int(row[0]))

    def rule(self, name: str) -> float:
        row = self._conn.execute("SELECT value FROM business_rules WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise ToolError(f"business rule '{name}' is not defined in this world")
        return float(row[0])

    def require_state(self, row: dict[str, Any], column: str, allowed: Sequence[Any], what: str) -> None:
        if row[column] not in allowed:
            wanted = " or ".join(str(a) for a in allowed)
            raise ToolError(f"{what} is {row[column]}; this action needs {column} {wanted}")

    def guard(self, left: Any, op: str, right: Any, message: str) -> None:
        if left is None or right is None or not COMPARE[op](left, right):
            raise ToolError(f"{message} (got {_fmt(left)}; must be {op} {_fmt(right)})")

    def audit(self, action: str, table: str, record_id: int) -> None:
        self._conn.execute(
            "INSERT INTO audit_log (actor_id, action, table_name, record_id, at) VALUES (?, ?, ?, ?, ?)",
            (self.actor, action, table, record_id, self.today),
        )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)

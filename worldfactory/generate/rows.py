"""Reading a seed database's rows back: the one helper the seed stage and the generators that write after it
(handbook, inbox, twins) share, here so they need not import each other."""

from __future__ import annotations

import sqlite3
from typing import Any


def fetch_dicts(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows as dicts keyed by column name (build stages read the seed this way)."""
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

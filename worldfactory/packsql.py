"""Pack SQL (invariants, derive), hand-written and drafted alike: confined by SQLite's authorizer and bounded.

A pack's SQL runs in the build, so it is held to one plain statement on the world's tables: the
authorizer sees every table, column and function a statement touches while it compiles, and anything
else (ATTACH, PRAGMA, DDL, load_extension) is refused; VACUUM INTO calls no authorizer action at all,
so a statement must also show the action its kind needs (a SELECT for an invariant). Running, it has a
work bound (SQLite's progress handler counts virtual-machine steps) and a length bound on any one string
or blob (SQLITE_LIMIT_LENGTH), so a 7-way cross join or printf('%.*c', 900000000, 'x') is refused with
the pack field that asked for it instead of hanging or allocating a gigabyte.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

Kind = Literal["invariant", "derive"]
READ = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
WRITE = READ | {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
ALLOWED: dict[Kind, set[int]] = {"invariant": READ, "derive": WRITE}
MUST: dict[Kind, set[int]] = {"invariant": {sqlite3.SQLITE_SELECT},
                              "derive": {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}}
WHAT: dict[Kind, str] = {"invariant": "an invariant is one SELECT returning a count",
                         "derive": "derive is one UPDATE, INSERT or DELETE"}
# printf/format pad inside one call, past any progress check: printf('%.*c', 900000000, 'x') spends a
# quarter of a second a row before the length limit sees its result. No pack needs them.
BANNED_FUNCTIONS = {"load_extension", "randomblob", "zeroblob", "sqlite_compileoption_get", "readfile",
                    "writefile", "fts3_tokenizer", "edit", "printf", "format"}
MAX_STEPS = 50_000_000  # SQLite VM steps per statement (about 1.5 s): the example worlds take at most 10,000
STEP_CHECK = 10_000  # the progress handler runs every this many steps
MAX_LENGTH = 1_000_000  # bytes of one string or blob a pack statement may make


class PackSQLError(ValueError):
    """A pack statement is not allowed, or ran past a bound: the message names the pack field."""


def refusal(conn: sqlite3.Connection, sql: str, kind: Kind) -> str:
    """Why this statement may not run as pack SQL of this kind, or ''. Compiled (EXPLAIN), never run."""
    seen: list[int] = []

    def auth(action: int, _a1: str | None, a2: str | None, db: str | None, _trigger: str | None) -> int:
        seen.append(action)
        if action not in ALLOWED[kind] or db not in (None, "main"):
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (a2 or "").lower() in BANNED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(auth)
    try:
        conn.execute("EXPLAIN " + sql)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        return f"not allowed in pack SQL ({exc}); use one plain statement on the pack's tables ({WHAT[kind]})"
    finally:
        conn.set_authorizer(None)
    if not any(a in MUST[kind] for a in seen):
        return f"not allowed in pack SQL: it must be one plain statement on the pack's tables ({WHAT[kind]})"
    return ""


@contextmanager
def bounded(conn: sqlite3.Connection, where: str, max_steps: int = MAX_STEPS) -> Iterator[None]:
    """Run pack SQL under the work and length bounds; past one, PackSQLError naming `where`."""
    steps = 0

    def progress() -> int:
        nonlocal steps
        steps += STEP_CHECK
        return 1 if steps > max_steps else 0

    old_length = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_LENGTH)
    old_attached = conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.set_progress_handler(progress, STEP_CHECK)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if steps > max_steps:
            raise PackSQLError(f"{where}: ran past {max_steps:,} SQLite steps (the work bound of one pack "
                               f"statement); make it cheaper, e.g. join on keys instead of a cross join") from None
        raise PackSQLError(f"{where}: {exc}") from None
    except sqlite3.DataError as exc:  # string or blob too big
        raise PackSQLError(f"{where}: {exc} (one value may be at most {MAX_LENGTH:,} bytes)") from None
    finally:
        conn.set_progress_handler(None, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, old_length)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, old_attached)


def with_clock(conn: sqlite3.Connection, clock: str) -> sqlite3.Connection:
    """Let derive statements read the world's clock as `today()` (an ISO date), so a status a derive moves
    can follow the dates it moved (a booking whose start has passed is no longer a request)."""
    conn.create_function("today", 0, lambda: clock, deterministic=True)
    return conn


def run(conn: sqlite3.Connection, sql: str, kind: Kind, where: str) -> list[Any]:
    """Check one pack statement with the authorizer, then run it bounded; its rows (invariants: one count)."""
    why = refusal(conn, sql, kind)
    if why:
        raise PackSQLError(f"{where}: {why}")
    with bounded(conn, where):
        return conn.execute(sql).fetchall()

"""Warm SQLite connections for episodes: an episode is one transaction, and reset is its rollback.

Opening a connection, or deserializing an image into one, makes SQLite parse the schema and the
change-log triggers again on the next statement (about a millisecond here), and empties its page
cache. So a world keeps a few connections that hold the start image, and an episode runs inside
one transaction on one of them: its end (or a reset) is a ROLLBACK, which undoes only the pages
it changed and leaves the schema and the cache warm.

Each connection has one authorizer for its whole life (setting it again would expire every
prepared statement): a Gate that refuses what tools may never do, whichever episode holds it.
The harness's own statements carry a secret tag, so a tool cannot borrow their cached plans.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from worldfactory.runtime.diff import CHANGES_TABLE

WRITE_ACTIONS = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
# Tools never attach databases, change the schema, set pragmas or end transactions.
DENIED_ACTIONS = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_PRAGMA,
                  sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT,
                  *(getattr(sqlite3, name) for name in dir(sqlite3)
                    if name.startswith(("SQLITE_CREATE_", "SQLITE_DROP_")))}
STATEMENT_CACHE = 2048  # prepared statements kept per connection: a world's tools, the harness and the diffs
IDLE_MAX = 16  # idle connections a world keeps; more episodes at once open more, and close them after


class Gate:
    """A connection's authorizer: the harness opens it for its own statements; tools never can."""

    def __init__(self) -> None:
        self.harness = False
        self.tag = f"/* harness {secrets.token_hex(8)} */"

    def __call__(self, action: int, arg1: str | None, _arg2: str | None, _db: str | None,
                 trigger: str | None) -> int:
        if self.harness:
            return sqlite3.SQLITE_OK
        if action in WRITE_ACTIONS and arg1 == CHANGES_TABLE and trigger is None:
            return sqlite3.SQLITE_DENY  # only the triggers write the change log
        if action in DENIED_ACTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK


class Session:
    """One pooled connection and its gate; `run` executes harness SQL."""

    def __init__(self, start_image: bytes, pragmas: tuple[str, ...] = ()) -> None:
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False,
                                    cached_statements=STATEMENT_CACHE)
        self.gate = Gate()
        self.savepoint, self.release, self.undo = (f"{sql} {self.gate.tag}" for sql in
                                                   ("SAVEPOINT tool_call", "RELEASE tool_call",
                                                    "ROLLBACK TO tool_call"))
        self.conn.execute("PRAGMA foreign_keys = ON")  # a connection setting: it outlives every deserialize
        self.conn.set_authorizer(self.gate)
        with self.opened():
            self.conn.deserialize(start_image)
            for pragma in pragmas:  # e.g. a smaller page cache for served sessions (see runtime/sessions.py)
                self.conn.execute(pragma)

    @contextmanager
    def opened(self) -> Iterator[sqlite3.Connection]:
        self.gate.harness = True
        try:
            yield self.conn
        finally:
            self.gate.harness = False

    def intact(self) -> bool:
        """Whether the gate still guards the connection: a statement tools may never run is refused.

        Generated code can only remove the gate by reaching the connection, which the static check
        forbids; this catches it if it ever does, so the episode is not graded and the connection not reused.
        """
        try:
            self.conn.execute("PRAGMA user_version")
        except sqlite3.DatabaseError:
            return True
        return False

    def run(self, sql: str) -> None:
        """Harness SQL, tagged (see Gate). Hot: it brackets every tool call."""
        self.gate.harness = True
        try:
            self.conn.execute(sql if sql.endswith(self.gate.tag) else f"{sql} {self.gate.tag}")
        finally:
            self.gate.harness = False


class ConnectionPool:
    """Idle sessions of one world, each holding the start image with no transaction open."""

    def __init__(self, start_image: bytes) -> None:
        self._start = start_image
        self.pragmas: tuple[str, ...] = ()  # run on each new connection after the image is loaded
        self._idle: list[Session] = []
        self._lock = threading.Lock()

    def acquire(self) -> Session:
        with self._lock:
            session = self._idle.pop() if self._idle else None
        return session or Session(self._start, self.pragmas)

    def release(self, session: Session) -> None:
        """Take a session back; an episode has rolled back its transaction before this."""
        try:
            if session.conn.in_transaction:
                session.run("ROLLBACK")
            if not session.intact():
                raise sqlite3.DatabaseError("the gate was removed")
        except sqlite3.Error:
            session.conn.close()
            return
        with self._lock:
            if len(self._idle) < IDLE_MAX:
                self._idle.append(session)
                return
        session.conn.close()


def tables_written(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute(f"SELECT DISTINCT tbl FROM {CHANGES_TABLE}")}

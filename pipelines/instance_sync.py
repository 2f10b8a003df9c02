"""The local instance's SQLite files written without waiting for the disk on every write.

Dagster's SQLite storage opens a connection for each read or write and closes it after. Each
commit waits for the disk (SQLite's default `synchronous=FULL`), and so does each close of the
last connection to a file, which checkpoints its write-ahead log: about 400 waits for every world
built through Dagster, 3 ms each on a quiet disk and tens of milliseconds while other builds are
writing. That is up to a second of wall time per world spent waiting, not computing.

With `synchronous=OFF` SQLite hands its writes to the operating system and goes on. A process that
is killed or crashes loses nothing (what it wrote is already in the kernel's cache); an operating
system crash or a power cut can lose the last writes to the instance or damage its files. The
instance is a record of runs, not the worlds: bundles and catalogs are written by the engine,
and an instance that is lost or reset only makes the next build rebuild the worlds it no longer
sees as current. `WORLDFACTORY_DAGSTER_SYNC=full` keeps SQLite's default. Only files under
DAGSTER_HOME are touched; PostgreSQL storage (the scale-out deployment) is unaffected.
"""

from __future__ import annotations

import os
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

ENV = "WORLDFACTORY_DAGSTER_SYNC"  # "full": SQLite's default durability for the instance's files


@lru_cache(maxsize=4)
def _home(value: str) -> Path:
    return Path(value).resolve()


def relaxed_sync() -> bool:
    """Whether the instance's SQLite files are written with synchronous=OFF (the default)."""
    return os.environ.get(ENV, "").strip().lower() != "full"


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    """Each new SQLite connection to a file under DAGSTER_HOME: synchronous=OFF, unless turned off."""
    home = os.environ.get("DAGSTER_HOME")
    if not home or not isinstance(dbapi_connection, sqlite3.Connection) or not relaxed_sync():
        return
    for _seq, name, path in dbapi_connection.execute("PRAGMA database_list").fetchall():
        if name == "main" and path and Path(path).resolve().is_relative_to(_home(home)):
            dbapi_connection.execute("PRAGMA synchronous=OFF")


def install() -> None:
    """Listen for new connections of every SQLAlchemy engine (Dagster makes one per storage call); idempotent."""
    if not event.contains(Engine, "connect", _on_connect):
        event.listen(Engine, "connect", _on_connect)

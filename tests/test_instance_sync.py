"""The local Dagster instance's SQLite files are written with synchronous=OFF (pipelines/instance_sync.py).

Seen through Dagster's own storage calls: every SQLite connection its run and event-log storage
opens under DAGSTER_HOME must come up with synchronous=OFF (0), files elsewhere must keep SQLite's
default (FULL, 2), and WORLDFACTORY_DAGSTER_SYNC=full must keep the default for the instance too.
"""

import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

from worldfactory_dagster.pipelines.instance_sync import ENV
from worldfactory_dagster.pipelines.runner import open_instance

warnings.filterwarnings("ignore", category=dg.BetaWarning)


@pytest.fixture
def seen() -> Iterator[list[tuple[str, int]]]:
    """(database file, synchronous) of every SQLite connection opened while the test runs, read after
    the project's listener (installed when `pipelines` is imported, so it runs first)."""
    found: list[tuple[str, int]] = []

    def record(conn: Any, _record: Any) -> None:
        if isinstance(conn, sqlite3.Connection):
            path = next((p for _, name, p in conn.execute("PRAGMA database_list") if name == "main"), "")
            found.append((path, conn.execute("PRAGMA synchronous").fetchone()[0]))

    event.listen(Engine, "connect", record)
    yield found
    event.remove(Engine, "connect", record)


def _use_instance() -> None:
    """Writes and reads through the run storage and the event log, as a build does."""
    instance = open_instance()
    try:
        instance.add_dynamic_partitions("worlds", ["a.b--v001"])
        assert instance.get_dynamic_partitions("worlds") == ["a.b--v001"]
        instance.report_runless_asset_event(dg.AssetMaterialization("probe", partition="a.b--v001"))
        assert instance.get_latest_materialization_event(dg.AssetKey("probe")) is not None
    finally:
        instance.dispose()


def test_instance_files_are_written_without_a_sync_per_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              seen: list[tuple[str, int]]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv(ENV, raising=False)
    _use_instance()
    ours = [(p, s) for p, s in seen if Path(p).is_relative_to(home)]
    assert len(ours) >= 3, seen  # the run storage and the event log were both opened
    assert {s for _, s in ours} == {0}, ours
    outside = tmp_path / "elsewhere.db"  # not the instance's: SQLite's default stays
    with create_engine(f"sqlite:///{outside}").connect() as conn:
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2


def test_full_sync_is_kept_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     seen: list[tuple[str, int]]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv(ENV, "full")
    _use_instance()
    ours = [(p, s) for p, s in seen if Path(p).is_relative_to(home)]
    assert ours and {s for _, s in ours} == {2}, ours

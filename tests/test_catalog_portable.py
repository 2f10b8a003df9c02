"""The catalog's DuckDB file survives a moved data folder, and `query` prints csv, json or a table.

Real Parquet rows (the catalog's own writer) and real DuckDB; the file is opened the two ways the
docs/catalogs.md gives: from the data root, and with `file_search_path` set to it.
"""

import csv
import io
import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from worldfactory.catalog import refresh_database, write_cost_rows
from worldfactory.cli import main as wf_main
from worldfactory.stages.core import StageCost

WORLDS = ("alpha.small--v001", "beta.small--v001")


def _catalog(root: Path) -> None:
    for i, wid in enumerate(WORLDS):
        write_cost_rows(root / "catalog", wid, {"world_brief": StageCost(cpu_seconds=1.5 + i, wall_seconds=2.0),
                                                 "seed_database": StageCost(cpu_seconds=0.25)})
    refresh_database(root)


SQL = "SELECT world_id, sum(cpu_seconds) AS cpu FROM costs GROUP BY world_id ORDER BY world_id"
EXPECTED = [(WORLDS[0], 1.75), (WORLDS[1], 2.75)]


def test_the_duckdb_file_keeps_working_when_the_data_folder_moves(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _catalog(tmp_path / "data")
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(tmp_path / "data", moved)
    with duckdb.connect(str(moved / "catalog.duckdb"), read_only=True) as con:
        views = con.execute("SELECT sql FROM duckdb_views() WHERE NOT internal").fetchall()
        assert views and not any(str(tmp_path) in sql for (sql,) in views)  # no absolute path is stored
        con.execute(f"SET file_search_path = '{moved}'")
        assert con.execute(SQL).fetchall() == EXPECTED
    monkeypatch.chdir(moved)  # or open it from the data root
    with duckdb.connect("catalog.duckdb", read_only=True) as con:
        assert con.execute(SQL).fetchall() == EXPECTED
    assert not os.path.exists(tmp_path / "data")


def test_query_prints_csv_json_and_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _catalog(data)
    assert wf_main(["query", SQL, "--data", str(data), "--format", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows == [["world_id", "cpu"], *[[w, str(c)] for w, c in EXPECTED]]
    for flag in (["--format", "json"], ["--json"]):  # --json stays as an alias
        assert wf_main(["query", SQL, "--data", str(data), *flag]) == 0
        assert json.loads(capsys.readouterr().out) == [{"world_id": w, "cpu": c} for w, c in EXPECTED]
    assert wf_main(["query", SQL, "--data", str(data)]) == 0
    table = capsys.readouterr().out
    assert WORLDS[0] in table and "2.75" in table and "2 row(s)" in table
    with pytest.raises(SystemExit):
        wf_main(["query", SQL, "--data", str(data), "--format", "xml"])
    assert "invalid choice: 'xml'" in capsys.readouterr().err

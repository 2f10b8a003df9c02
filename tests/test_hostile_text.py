"""The lows of issue 35 (criterion 6): text from packs and models stays readable and inert where it is
written (tasks.jsonl, README.md, the terminal); world IDs are checked in one place; a bundle's file
list is checked before its files are read; `query` reads only the catalog and installs nothing."""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory.briefs import expand_world
from worldfactory.catalog import CatalogError, query
from worldfactory.registry import mark_deleted
from worldfactory.runtime.world import World, WorldError, read_bundle
from worldfactory.seeds import SeedError, check_world_id, world_id_problem
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

WORLD = SMALL[0]  # help-desk.small--v001
LABEL = "fee\u2028after a line separator\u2029and a paragraph separator"
DESCRIPTION = "<img src=x onerror=alert(1)> requests & <b>more</b>\x1b[31m"
RULE_LABEL = "<script>alert('rule')</script> limit"


def test_separators_stay_escaped_in_tasks_jsonl_and_html_is_escaped_in_the_readme(tmp_path: Path) -> None:
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    for old, new in [("{name: fee, type: money,", f"{{name: fee, label: {json.dumps(LABEL)}, type: money,"),
                     ("    singular: request\n",
                      f"    singular: request\n    description: {json.dumps(DESCRIPTION)}\n"),
                     ("label: service credit limit}", f"label: {json.dumps(RULE_LABEL)}}}")]:
        assert old in text
        text = text.replace(old, new)
    pack.write_text(text)
    bundle = Path(build_world(WORLD, tmp_path / "data", templates=load_templates(root)).path)
    raw = (bundle / "tasks.jsonl").read_bytes()
    assert "\u2028".encode() not in raw and "\u2029".encode() not in raw and b"\\u2028" in raw
    lines = raw.decode().splitlines()  # what every reader of the file does
    tasks = [json.loads(line) for line in lines]
    assert any(LABEL in t["instruction"] for t in tasks)  # the same text, read back whole
    assert len(World(read_bundle(bundle)).tasks) == len(tasks)
    readme = (bundle / "README.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt; requests &amp; &lt;b&gt;more&lt;/b&gt;\\x1b[31m" in readme
    assert "&lt;script&gt;alert('rule')&lt;/script&gt; limit" in readme
    assert "<img" not in readme and "<script" not in readme and "<b>" not in readme and "\x1b" not in readme


@pytest.mark.parametrize("bad", ["help-desk.small--v001\n", "help-desk.small--v001 ", " help-desk.small--v001",
                                 "help-desk.small--v0\x1b[2J01", "brief.acme--v001\n", "help-desk.small\t--v001"])
def test_world_ids_with_whitespace_or_controls_are_refused_everywhere(tmp_path: Path, bad: str) -> None:
    assert world_id_problem(bad)
    assert "\x1b" not in world_id_problem(bad) and "\n" not in world_id_problem(bad)
    ts = load_templates(small_templates_at(tmp_path / "templates"))
    for call in (lambda: check_world_id(bad), lambda: expand_world(bad, ts),
                 lambda: build_world(bad, tmp_path / "data", templates=ts),
                 lambda: mark_deleted(tmp_path / "data", bad)):
        with pytest.raises(SeedError, match="is not a world ID"):
            call()
    assert not (tmp_path / "data").exists()  # nothing was named after it
    assert world_id_problem("help-desk.small--v001") == "" and world_id_problem("brief.acme-desk--v002") == ""


def test_the_cli_shows_control_characters_of_messages_as_escapes(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    from worldfactory.cli import ERR, main

    ERR.print("error: \x1b]0;owned\x07\x1b[2Jsaid by a model\u202e", markup=False, highlight=False)
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    pack.write_text(pack.read_text().replace("modules: [org,", "modules: [\"\\e]0;owned\\a\", org,"))
    assert main(["check-pack", "--templates", str(root), str(pack)]) == 2
    out = capsys.readouterr()
    said = out.out + out.err
    assert "\x1b" not in said and "\x07" not in said and "\u202e" not in said
    assert "\\x1b]0;owned\\x07\\x1b[2Jsaid by a model\\u202e" in said
    assert "unknown module '\\x1b]0;owned\\x07'" in said


def test_a_bundles_file_list_is_checked_before_any_file_is_read(tmp_path: Path, small_data: Path) -> None:
    bundle = tmp_path / WORLD
    shutil.copytree(small_data / "worlds" / WORLD, bundle)
    with (bundle / "planted.bin").open("wb") as f:  # 256 MB that read_bundle read whole before refusing it
        f.truncate(256 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(WorldError, match="planted.bin: not listed in world.json"):
            read_bundle(bundle)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024, peak
    os.unlink(bundle / "planted.bin")
    assert set(read_bundle(bundle)) >= {"world.json", "tasks.jsonl", "seed.db"}


@pytest.mark.parametrize("sql", ["SELECT * FROM read_text('/etc/hostname')",
                                 "SELECT * FROM read_parquet('https://example.invalid/x.parquet')",
                                 "SELECT * FROM read_csv('/etc/passwd')"])
def test_query_reads_only_the_catalog_and_installs_no_extension(small_data: Path, sql: str) -> None:
    columns, rows = query(small_data, "SELECT count(*) AS n FROM worlds")
    assert columns == ["n"] and rows[0][0] >= 1
    with pytest.raises(CatalogError, match="disabled by configuration"):
        query(small_data, sql)
    with pytest.raises(CatalogError):
        query(small_data, "SELECT * FROM worlds; SET enable_external_access = true")

"""`worldfactory export` writes a dataset card, splits held out by world or domain, and the tools once per world."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from worldfactory.adapters.hf_dataset import ExportError, export_rows, split_groups, split_rows
from worldfactory.cli import main


def test_groups_split_by_hash_disjoint_and_whatever_the_order() -> None:
    names = {f"domain-{i:02d}.v--v001" for i in range(30)}
    where = split_groups(names)
    counts = {s: sum(1 for v in where.values() if v == s) for s in ("train", "validation", "test")}
    assert counts == {"train": 24, "validation": 3, "test": 3}
    assert split_groups(set(sorted(names, reverse=True))) == where  # the same whatever the order
    assert sorted(split_groups({"a", "b", "c"}).values()) == ["test", "train", "validation"]
    assert sorted(split_groups({"a", "b"}).values()) == ["test", "train"]
    assert list(split_groups({"a"}).values()) == ["train"]
    with pytest.raises(ExportError, match="split by 'family': use one of world, domain"):
        split_rows([], "family")


@pytest.mark.parametrize("split_by", ["world", "domain"])
def test_splits_hold_out_whole_worlds_or_domains(worlds_dir: Path, split_by: str) -> None:
    rows = export_rows([worlds_dir / w for w in EXAMPLES])
    splits = split_rows(rows, split_by)
    key = "world_id" if split_by == "world" else "domain"
    owners = [{r[key] for r in part} for part in splits.values()]
    assert all(owners) and sum(len(o) for o in owners) == len(set.union(*owners))  # none in two splits, none empty
    assert sorted(r["task_id"] + r["world_id"] for p in splits.values() for r in p) == sorted(
        r["task_id"] + r["world_id"] for r in rows)  # every row once


def test_the_card_says_what_the_rows_are_and_how_they_were_made(worlds_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import datasets

    out = tmp_path / "ds"
    assert main(["export", "--data", str(worlds_dir.parent), "--out", str(out), "--format", "parquet",
                 "--split-by", "domain", "--license", "cc-by-4.0"]) == 0
    assert "splits held out by domain" in capsys.readouterr().out
    card = (out / "README.md").read_text()
    header = card.split("---")[1]
    assert "license: cc-by-4.0" in header and "config_name: tasks" in header and "config_name: tools" in header
    for wid in EXAMPLES:
        band = json.loads((worlds_dir / wid / "world.json").read_text())["pass_band"]
        assert f"policy `{band['policy']}`, {band['k']} rollouts per task" in card
    assert "Held out by **domain**" in card and "## Fields" in card and "| pass_rate |" in card
    tasks = datasets.load_dataset(str(out), "tasks", cache_dir=str(tmp_path / "cache"))
    tools = datasets.load_dataset(str(out), "tools", cache_dir=str(tmp_path / "cache"))["train"]
    for name, part in tasks.items():  # the card's split table matches the files
        assert f"| {name} | {len(part)} | {len(set(part['world_id']))} |" in card
    assert "tools" not in tasks["train"].column_names
    assert sorted(tools["world_id"]) == sorted(EXAMPLES)  # once per world
    task_bytes = sum((out / "tasks" / f"{s}.parquet").stat().st_size for s in tasks)
    assert task_bytes < (out / "tools" / "tools.parquet").stat().st_size * len(EXAMPLES)  # tools not on every row

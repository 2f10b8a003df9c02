"""`worldfactory export`: curated tasks as a Hugging Face dataset, read back and checked against the catalog."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, PYTHON
from worldfactory.adapters.hf_dataset import ExportError, export_rows, world_rows, write_dataset
from worldfactory.catalog import query
from worldfactory.cli import main

# The pass band as the catalog sees it: a task whose rollouts neither all pass nor all fail.
CURATED_SQL = """
SELECT t.world_id, t.task_id, t.family, t.instruction, t.oracle_steps, t.answer_type, round(avg(r.reward), 4)
FROM tasks t JOIN rollouts r USING (world_id, task_id)
GROUP BY ALL HAVING avg(r.reward) > 0 AND avg(r.reward) < 1 ORDER BY 1, 2
"""


def export(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WORLDFACTORY_DATA": str(data), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(data.parent / "hf-cache")}
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", "export", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_export_loads_back_and_matches_the_catalog(worlds_dir: Path, tmp_path: Path) -> None:
    import datasets  # here, not at the top: the other tests (and xdist's collection) do not need it

    root = worlds_dir.parent
    r = export("--out", str(tmp_path / "ds"), data=root)
    assert r.returncode == 0, r.stderr
    splits = datasets.load_from_disk(str(tmp_path / "ds" / "tasks"))
    assert list(splits) == ["train", "validation", "test"]
    ds = datasets.concatenate_datasets(list(splits.values())).sort(["world_id", "task_id"])
    _, catalog = query(root, CURATED_SQL)
    assert len(catalog) > 20 and {row[0] for row in catalog} == set(EXAMPLES)
    got = [(x["world_id"], x["task_id"], x["family"], x["instruction"], x["horizon"], x["answer_type"], x["pass_rate"])
           for x in ds]
    assert got == [tuple(row) for row in catalog]
    assert f"wrote {len(catalog)} task(s) of {len(EXAMPLES)} world(s)" in r.stdout

    first = ds[0]
    assert "tools" not in ds.column_names  # the tools are a table of their own, once per world
    tools_table = datasets.load_from_disk(str(tmp_path / "ds" / "tools"))
    assert tools_table["world_id"] == sorted(EXAMPLES)
    tools = json.loads(tools_table[tools_table["world_id"].index(first["world_id"])]["tools"])
    manifest = json.loads((worlds_dir / first["world_id"] / "tools.json").read_text())
    assert [t["function"]["name"] for t in tools] == [t["name"] for t in manifest]
    assert tools[0]["function"]["parameters"] == manifest[0]["input_schema"]
    assert first["prompt"] == [{"role": "user", "content": first["instruction"]}]

    # Parquet, one world, every served task (in process: the subprocess above checked the command itself).
    one = EXAMPLES[0]
    assert main(["export", one, "--data", str(root), "--format", "parquet", "--all-tasks",
                 "--out", str(tmp_path / "pq")]) == 0
    pq = datasets.load_dataset(str(tmp_path / "pq"), "tasks", cache_dir=str(tmp_path / "hf-cache"))["train"]
    served = json.loads((worlds_dir / one / "verifiers.json").read_text())["tasks"]
    assert pq.features == ds.features and sorted(pq["task_id"]) == pq["task_id"] == sorted(served)
    in_band = {x["task_id"]: x["pass_rate"] for x in ds if x["world_id"] == one}
    assert {x["task_id"]: x["pass_rate"] for x in pq if x["pass_rate"] is not None} == in_band


def test_export_is_byte_for_byte_repeatable(worlds_dir: Path, tmp_path: Path) -> None:
    bundles = [worlds_dir / w for w in EXAMPLES]
    for out in ("a", "b"):
        write_dataset(export_rows(bundles), tmp_path / out, worlds=world_rows(bundles))
        write_dataset(export_rows(list(reversed(bundles))), tmp_path / out / "pq", "parquet",
                      worlds=world_rows(list(reversed(bundles))))
    names = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert {"README.md", "tasks/dataset_dict.json", "pq/tasks/test.parquet", "pq/tools/tools.parquet"} <= set(names)
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_bad_bundles_are_named(worlds_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "worlds" / EXAMPLES[0]
    shutil.copytree(worlds_dir / EXAMPLES[0], bundle)
    curated = bundle / "curated_tasks.jsonl"
    lines = curated.read_text().splitlines()
    row = json.loads(lines[1])
    curated.write_text("\n".join([lines[0], json.dumps({**row, "task_id": "no-such-task"}), *lines[2:]]) + "\n")
    with pytest.raises(ExportError, match=r"curated_tasks.jsonl:2: field 'task_id': 'no-such-task' is not a task"):
        export_rows([bundle])
    curated.write_text(json.dumps({"task_id": row["task_id"]}) + "\n")
    with pytest.raises(ExportError, match=r"curated_tasks.jsonl:1: field 'pass_rate' is missing"):
        export_rows([bundle])
    (bundle / "tools.json").unlink()
    with pytest.raises(ExportError, match=r"tools.json: missing"):
        world_rows([bundle])

    assert main(["export", "--data", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert "no built worlds under" in capsys.readouterr().err
    assert main(["export", "no-such-world", "--data", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no world 'no-such-world'" in capsys.readouterr().err
    assert main(["export", EXAMPLES[0], "--data", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "tools.json: missing" in capsys.readouterr().err and not (tmp_path / "out").exists()

"""Engine guarantees: determinism across processes, clear template errors, no half-written worlds."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, PYTHON, ROOT, SMALL
from worldfactory.stages.pipeline import StageFailed, build_world
from worldfactory.templates import TemplateError, load_templates

WORLD = "insurance-claims.startup--v002"


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_same_world_in_another_process_is_byte_identical(tmp_path: Path, worlds_dir: Path) -> None:
    """A fresh process with another hash seed builds exactly the bytes the test session built."""
    out = tmp_path / "other"
    r = subprocess.run([PYTHON, "-m", "worldfactory.cli", "build", EXAMPLES[0], "--no-dagster", "--data", str(out)],
                       capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "7"})
    assert r.returncode == 0, r.stderr
    here, there = _hashes(worlds_dir / EXAMPLES[0]), _hashes(out / "worlds" / EXAMPLES[0])
    assert here == there
    assert {"seed.db", "tools.py", "tools.json", "tasks.jsonl", "verifiers.json", "world.json"} <= set(here)


def test_variants_differ(tmp_path: Path, small_templates: Path, small_data: Path) -> None:
    """Two variants of one seed type (of the small template set: the variant mechanics, not the size)."""
    other = SMALL[0].replace("--v001", "--v002")
    b = build_world(other, tmp_path, load_templates(small_templates))
    ha, hb = _hashes(small_data / "worlds" / SMALL[0]), _hashes(Path(b.path))
    assert ha["seed.db"] != hb["seed.db"] and ha["tasks.jsonl"] != hb["tasks.jsonl"]


def _copy_templates(tmp_path: Path) -> Path:
    dest = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", dest)
    return dest


def test_bad_template_names_file_and_field(tmp_path: Path) -> None:
    root = _copy_templates(tmp_path)
    path = root / "domains" / "insurance-claims.yaml"
    path.write_text(path.read_text().replace("{name: fraud_score, type: number,", "{name: fraud_score, type: decimal,"))
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    text = str(err.value)
    assert str(path) in text and "tables[2:claims].columns[7:fraud_score].type" in text


def test_unknown_key_is_rejected(tmp_path: Path) -> None:
    root = _copy_templates(tmp_path)
    path = root / "company_types" / "startup.yaml"
    path.write_text(path.read_text() + "colour: blue\n")
    with pytest.raises(TemplateError, match=r"startup.yaml: field 'colour'"):
        load_templates(root)


def test_failed_build_leaves_nothing_half_written(tmp_path: Path) -> None:
    root = _copy_templates(tmp_path)
    path = root / "domains" / "insurance-claims.yaml"
    path.write_text(path.read_text().replace(
        'sql: "SELECT count(*) FROM claims WHERE filed_on < incident_date"',
        'sql: "SELECT count(*) FROM claims WHERE filed_on >= incident_date"'))
    out = tmp_path / "out"
    with pytest.raises(StageFailed, match="seed_integrity.*claims are filed after the incident"):
        build_world(WORLD, out, load_templates(root))
    assert not (out / "worlds").exists() or list((out / "worlds").iterdir()) == []
    assert list((out / "build").iterdir()) == []
    assert not (out / "catalog" / "worlds").exists()  # only the spend so far is recorded, under costs

"""world_templates/README.md: the shared module reference is generated from the module YAMLs and current,
and its example pack builds as written (issue 31)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from tests.conftest import ROOT
from worldfactory.dryrun import dry_run
from worldfactory.module_reference import BEGIN, END, main, reference, rewrite
from worldfactory.packs import check_files
from worldfactory.spec import DomainPack
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_model, load_templates

README = ROOT / "world_templates" / "README.md"


def test_the_module_reference_is_current_and_names_every_table_column_status_and_tool(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    assert main(["--check"]) == 0, "run `python -m worldfactory.module_reference`"
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    ts = load_templates()
    for m in ts.modules.values():
        for t in m.tables:
            assert f"#### `{t.name}` ({t.singular};" in section
            for c in t.columns:
                assert f"| `{c.name}` | {c.type} |" in section
            for tr in t.workflow.transitions if t.workflow else []:
                assert f"`{tr.name}` {', '.join(tr.from_)} → {tr.to}" in section
    assert "| `starts_on` | date |  | plan |" in section and "`create_note`" in section
    # planted: a module changes; the check fails until the script writes the section again
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    notes = root / "modules" / "notes.yaml"
    notes.write_text(notes.read_text().replace("singular: note\n", "singular: record note\n", 1))
    assert main(["--templates", str(root), "--check"]) == 1
    assert main(["--templates", str(root)]) == 0 and main(["--templates", str(root), "--check"]) == 0
    assert "#### `notes` (record note;" in (root / "README.md").read_text()
    assert rewrite(text, reference(ts.modules)) == text  # rewriting is idempotent


def test_the_readme_example_pack_builds(tmp_path: Path) -> None:
    [example] = re.findall(r"```yaml example-pack\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    name = yaml.safe_load(example)["name"]
    pack = root / "domains" / f"{name}.yaml"
    pack.write_text(example)
    catalog = root / "catalog.yaml"
    catalog.write_text(catalog.read_text().replace("domains:\n", f"domains:\n  - {name}\n", 1))
    assert check_files([pack]) == []
    found = dry_run(pack, load_model(pack, DomainPack), load_templates(root))
    assert found.failures == [] and found.tasks >= 100, found.failures
    result = build_world(f"{name}.startup--v001", tmp_path / "data", templates=load_templates(root))
    assert result.counts["tasks"] >= 100 and result.verification["oracle_pass"] == result.counts["tasks"]
    assert (tmp_path / "data" / "worlds" / f"{name}.startup--v001" / "seed.db").is_file()

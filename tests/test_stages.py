"""One stage registry: the engine, Dagster, the bundle, the confined worker and the docs all follow it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import EXAMPLES, PYTHON, ROOT
from worldfactory.stages import BUNDLE_FILES, STAGES
from worldfactory.stages.core import Stage
from worldfactory_dagster.pipelines.definitions import make_definitions

STAGE_DIR = ROOT / "worldfactory" / "stages"
SHARED = {"__init__", "core", "pipeline"}


def test_every_stage_module_declares_one_stage_listed_once() -> None:
    modules = sorted(p.stem for p in STAGE_DIR.glob("*.py") if p.stem not in SHARED)
    declared = {}
    for name in modules:
        module = __import__(f"worldfactory.stages.{name}", fromlist=["STAGE"])
        assert isinstance(getattr(module, "STAGE", None), Stage), f"worldfactory/stages/{name}.py declares no STAGE"
        declared[name] = module.STAGE
    assert sorted(s.name for s in STAGES) == sorted(s.name for s in declared.values())
    assert len({s.name for s in STAGES}) == len({s.check for s in STAGES}) == len(STAGES)
    every_check = [c for s in STAGES for c in s.checks]
    assert len(every_check) == len(set(every_check))
    written = [f for s in STAGES for f in s.writes]
    assert len(written) == len(set(written)) and tuple(written) == BUNDLE_FILES
    for i, stage in enumerate(STAGES):  # a stage reads only what an earlier stage wrote
        earlier = {f for s in STAGES[:i] for f in s.writes}
        assert set(stage.reads) <= earlier, (stage.name, set(stage.reads) - earlier)
        assert set(stage.confined) <= {"make", "prove"}


def test_dagster_assets_and_checks_follow_the_registry() -> None:
    defs = make_definitions()
    graph = defs.resolve_asset_graph()
    # the catalog, the on-request image (assets/image.py), evaluation runs (assets/evals.py, by run) and a text
    # brief's draft step (assets/draft.py), upstream of the first stage
    others = ("world_catalog", "world_image", "eval_run", "pack_draft")
    keys = [k.to_user_string() for k in graph.get_all_asset_keys() if k.to_user_string() not in others]
    assert sorted(keys) == sorted(s.name for s in STAGES)
    draft = graph.get(dg.AssetKey("pack_draft"))
    assert not draft.parent_keys and {c.name for c in draft.check_keys} == {"draft_proven"}
    assert "llm_api" in (draft.pools or [])  # the one asset that calls a model to build a world's inputs
    for before, stage in zip((None, *STAGES[:-1]), STAGES, strict=True):
        node = graph.get(dg.AssetKey(stage.name))
        parents = {p.to_user_string() for p in node.parent_keys}
        assert parents == ({before.name} if before else {"pack_draft"}), stage.name
        checks = {c.name for c in node.check_keys}
        assert checks == set(stage.checks), stage.name  # the proof's check and each gate's, from the declaration
        pools = {p for p in (node.pools or [])}
        assert ("llm_api" in pools) == stage.uses_model, stage.name
    catalog = graph.get(dg.AssetKey("world_catalog"))
    assert {p.to_user_string() for p in catalog.parent_keys} == {STAGES[-1].name}


def test_a_published_bundle_holds_exactly_the_stages_files(worlds_dir: Path) -> None:
    folder = worlds_dir / EXAMPLES[0]
    assert sorted(p.name for p in folder.iterdir()) == sorted(BUNDLE_FILES)
    manifest = json.loads((folder / "world.json").read_text())
    assert list(manifest["costs"]) == sorted(s.name for s in STAGES)
    assert set(manifest["files"]) | {"world.json"} == set(BUNDLE_FILES)


def test_docs_list_the_stages_in_registry_order() -> None:
    order = [s.name for s in STAGES]
    pipeline = (ROOT / "docs" / "dagster.md").read_text()
    chain = re.search(r"`world_brief` ->.*?`world_bundle`", pipeline, re.S)
    assert chain is not None, "docs/dagster.md: the pipeline's chain of stages is missing"
    assert re.findall(r"`(\w+)`", chain.group(0)) == order
    arch = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \|", arch, re.M)
    assert [name for name, _ in rows] == order, "docs/architecture.md: the stage table differs from the registry"
    assert [check for _, check in rows] == [s.check for s in STAGES]


DAGSTER_SIDE = {"worldfactory_dagster", "pipelines", "resources", "assets", "dagster", "dagster_docker",
                "dagster_postgres", "dagster_webserver"}


def dagster_side_imports(path: Path) -> set[str]:
    """The modules of the Dagster side (the code location, Dagster itself) that a source file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} if node.module.split(".")[0] in DAGSTER_SIDE else set()
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in DAGSTER_SIDE}
    return found


def test_the_engine_reaches_dagster_only_through_the_cli_and_its_runner() -> None:
    """Every source file under worldfactory/, the adapters included: only cli.py imports the Dagster side,
    and only worldfactory_dagster.pipelines.runner (inside the commands that build through Dagster)."""
    found = {str(p.relative_to(ROOT)): mods for p in sorted((ROOT / "worldfactory").rglob("*.py"))
             if (mods := dagster_side_imports(p))}
    assert found == {"worldfactory/cli.py": {"worldfactory_dagster.pipelines.runner"}}


def test_no_engine_module_loads_dagster() -> None:
    """Every engine module, the CLI included, imported in a fresh process: no dagster module, not even
    through a library. The modules on the optional `trainers` extra (worldfactory.adapters, and the
    images' OpenEnv provider) are left out here: they import only the engine and the trainers' libraries
    (the test above reads their sources), and importing those (torch; gradio through OpenEnv, 5 s alone)
    was most of this test's time."""
    code = ("import sys, pkgutil, importlib, worldfactory\n"
            "names = [m.name for m in pkgutil.walk_packages(worldfactory.__path__, 'worldfactory.')\n"
            "         if not m.name.startswith('worldfactory.adapters') and m.name != 'worldfactory.images.openenv']\n"
            "for name in names:\n"
            "    importlib.import_module(name)\n"
            "print(len(names), sorted(k for k in sys.modules if k.split('.')[0] in ('dagster', 'worldfactory_dagster', "
            "'pipelines', 'assets', 'resources')))\n")
    r = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    count, loaded = r.stdout.split(" ", 1)
    assert int(count) >= 30  # the whole engine, cli.py included
    assert loaded.strip() == "[]"


def test_the_repository_cites_nothing_outside_itself() -> None:
    """The README, docs, code and benches stand alone: no pointer to a design document kept elsewhere."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "bench").glob("*.py"),
             *(ROOT / "worldfactory").rglob("*.py"), *(ROOT / "world_templates").rglob("*.md")]
    cited = [str(p.relative_to(ROOT)) for p in files if re.search(r"\.\./shared|ARCHITECTURE\b", p.read_text())]
    assert cited == []


def test_the_bundle_stage_reads_the_registry_handed_down() -> None:
    """world_bundle reads STAGES from stages/core.py (register_stages), not by importing the registry above it:
    the list it reads is the registry's, in order, and an empty one is refused rather than read as no stages."""
    from worldfactory.stages import core

    assert core.registered_stages() == STAGES
    try:
        core.register_stages(())
        with pytest.raises(core.StageError, match="no stages registered"):
            core.registered_stages()
    finally:
        core.register_stages(STAGES)
    assert core.registered_stages()[-1].name == "world_bundle"

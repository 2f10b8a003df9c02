"""A world's inputs fingerprint covers exactly the engine code that builds worlds and the template files
and brief file that world reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import EXAMPLES, PYTHON, ROOT, SMALL
from tests.import_graph import import_graph
from worldfactory.fingerprints import (
    NOT_WORLD_CODE,
    engine_fingerprint,
    left_out,
    source_fingerprint,
    world_inputs_fingerprint,
    world_template_files,
)
from worldfactory.seeds import catalog_world_ids
from worldfactory.stages.core import inputs_fingerprint
from worldfactory.stages.pipeline import is_up_to_date
from worldfactory.templates import load_templates

INSURANCE = "insurance-claims.regional--v001"
LITIGATION = "litigation-firm.national--v001"
COMMERCE = "commerce-operations.startup--v001"


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", dest)
    return dest


def _touch(path: Path) -> None:
    path.write_text(path.read_text() + "\n# touched\n")


def _prints(root: Path, ids: list[str], briefs: Path | None = None) -> dict[str, str]:
    ts = load_templates(root)
    return {w: world_inputs_fingerprint(ts, w, briefs) for w in ids}


def test_files_are_the_domain_company_type_composed_modules_and_vocabulary() -> None:
    ts = load_templates()
    files = world_template_files(ts, INSURANCE)
    domain, ctype = ts.domains["insurance-claims"], ts.company_types["regional"]
    modules = list(domain.modules) + [m for m in domain.optional_modules if m in ctype.extra_modules]
    assert files == sorted({"domains/insurance-claims.yaml", "company_types/regional.yaml", "vocabulary.yaml",
                            *(f"modules/{m}.yaml" for m in modules)})
    assert not any(f.startswith("domains/litigation") or f in ("catalog.yaml", "registry.yaml") for f in files)
    assert inputs_fingerprint(ts, INSURANCE) == world_inputs_fingerprint(ts, INSURANCE)  # the engine uses it


def test_a_domain_pack_change_touches_only_that_domains_worlds(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    ts = load_templates(root)
    ids = catalog_world_ids(ts, variants=1)
    before = _prints(root, ids)
    _touch(root / "domains" / "insurance-claims.yaml")
    after = _prints(root, ids)
    changed = {w for w in ids if before[w] != after[w]}
    assert changed == {w for w in ids if w.startswith("insurance-claims.")}


def test_company_type_vocabulary_and_catalog_changes(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    ids = [INSURANCE, LITIGATION, COMMERCE]
    before = _prints(root, ids)
    _touch(root / "company_types" / "national.yaml")
    after = _prints(root, ids)
    assert {w for w in ids if before[w] != after[w]} == {LITIGATION}
    _touch(root / "catalog.yaml")
    _touch(root / "registry.yaml")
    assert _prints(root, ids) == after  # which worlds exist is not what is in one
    _touch(root / "vocabulary.yaml")
    assert all(v != after[w] for w, v in _prints(root, ids).items())


def test_a_shared_module_change_touches_the_worlds_that_compose_it(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    ts = load_templates(root)
    ids = catalog_world_ids(ts, variants=1)
    users = {w for w in ids if "modules/approvals.yaml" in world_template_files(ts, w)}
    assert users and users != set(ids)  # an optional module: some worlds compose it, some do not
    before = _prints(root, ids)
    _touch(root / "modules" / "approvals.yaml")
    after = _prints(root, ids)
    assert {w for w in ids if before[w] != after[w]} == users


def test_a_brief_world_follows_its_brief_file(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    briefs = tmp_path / "briefs"
    briefs.mkdir()
    brief = briefs / "harbor-mutual.yaml"
    brief.write_text("domain: insurance-claims\ncompany_type: regional\ncompany_name: Harbor Mutual\n")
    wid = "brief.harbor-mutual--v001"
    ts = load_templates(root)
    assert world_template_files(ts, wid, briefs) == world_template_files(ts, INSURANCE)
    first = _prints(root, [wid], briefs)[wid]
    _touch(root / "domains" / "litigation-firm.yaml")
    assert _prints(root, [wid], briefs)[wid] == first
    brief.write_text(brief.read_text().replace("Harbor Mutual", "Harbour Mutual"))
    assert _prints(root, [wid], briefs)[wid] != first
    brief.unlink()  # a missing brief: every template counts, and the build says what is wrong
    assert "domains/litigation-firm.yaml" in world_template_files(ts, wid, briefs)


# --- the engine's part: the code that builds worlds, not the applications around it -----------------------

ENGINE = ROOT / "worldfactory"


def _engine_copy(tmp_path: Path) -> Path:
    """A copy of the engine's source tree (worldfactory/) beside the project's templates."""
    src = tmp_path / "src"
    shutil.copytree(ENGINE, src / "worldfactory", ignore=shutil.ignore_patterns("__pycache__"))
    os.symlink(ROOT / "world_templates", src / "world_templates")
    return src


def _module_files(package: Path, name: str) -> list[Path]:
    """The source files of a dotted module path under worldfactory/ (a module, or a package's every file)."""
    path = package.joinpath(*name.split("."))
    return [path.with_suffix(".py")] if path.with_suffix(".py").is_file() else sorted(path.rglob("*.py"))


def test_every_left_out_module_exists_and_editing_one_keeps_the_fingerprint(tmp_path: Path) -> None:
    package = _engine_copy(tmp_path) / "worldfactory"
    first = source_fingerprint(package)
    assert first == engine_fingerprint()  # a copy of the same source: the same fingerprint
    for name in NOT_WORLD_CODE:
        files = _module_files(package, name)
        assert files, f"NOT_WORLD_CODE names {name}, which is not a module or package of worldfactory/"
        for path in files:
            _touch(path)
        assert source_fingerprint(package) == first, name
    for path in (package / "generate" / "tools.py", package / "stages" / "bundle.py", package / "spec.py"):
        _touch(path)
        assert source_fingerprint(package) != first, path
        first = source_fingerprint(package)


def build_closure() -> set[str]:
    """Every worldfactory module that building a world imports, from the stages and build_world down
    (deferred imports included; importing a.b.c runs a and a.b too)."""
    graph = import_graph()
    seen: set[str] = set()
    todo = ["worldfactory.stages", "worldfactory.stages.pipeline"]
    while todo:
        module = todo.pop()
        if module in seen or module not in graph:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += sorted(graph[module])
    return seen


def test_the_build_never_imports_a_left_out_module() -> None:
    """What NOT_WORLD_CODE leaves out cannot change a world's bytes: no module a build runs imports it."""
    closure = build_closure()
    assert {"worldfactory.stages.bundle", "worldfactory.generate.tools", "worldfactory.confine"} <= closure
    assert not any(m.startswith("worldfactory_dagster") for m in closure)  # the Dagster layer: never hashed
    reached = sorted(m for m in closure if m.count(".") and left_out(Path(*m.split(".")[1:]).with_suffix(".py")))
    assert not reached, f"the build imports {reached}: drop them from NOT_WORLD_CODE (they write world bytes)"


def _cli(src: Path, data: Path, *args: str, templates: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m worldfactory.cli ARGS` run from a copy of the engine's source (PYTHONPATH=src)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("WORLDFACTORY_DATA", None)
    env.pop("WORLDFACTORY_TEMPLATES", None)
    if templates is not None:
        env["WORLDFACTORY_TEMPLATES"] = str(templates)
    out = subprocess.run([PYTHON, "-m", "worldfactory.cli", *args, "--data", str(data)], cwd=src.parent, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _build_examples(src: Path, data: Path, templates: Path | None = None) -> dict[str, bool]:
    """`worldfactory build --examples --no-dagster` from a copy of the engine: world ID -> was it cached."""
    out = _cli(src, data, "build", "--examples", "--no-dagster", "--json", templates=templates)
    return {r["world_id"]: r["skipped"] for r in json.loads(out.stdout)}


STALE = """
import json, sys
from pathlib import Path
from worldfactory.fingerprints import engine_fingerprint
from worldfactory.stages.core import inputs_fingerprint
from worldfactory.stages.pipeline import is_up_to_date
from worldfactory.stages.pipeline import is_up_to_date
from worldfactory.templates import load_templates
data, ts = Path(sys.argv[1]), load_templates()
print(json.dumps({"engine": engine_fingerprint(), "current": {
    w: is_up_to_date(data / "worlds" / w, inputs_fingerprint(ts, w, data / "briefs")) for w in ts.catalog.examples}}))
"""


def _current(src: Path, data: Path) -> dict:
    """What the build in a copy of the engine sees: its engine fingerprint, and which examples are up to date."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("WORLDFACTORY_TEMPLATES", None)
    out = subprocess.run([PYTHON, "-c", STALE, str(data)], cwd=src.parent, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_cli_help_keeps_the_examples_cached_and_a_generator_change_makes_them_stale(tmp_path: Path,
                                                                                     worlds_dir: Path) -> None:
    """A real copy of the engine's source: its CLI's help text edited (and every other left-out module
    touched), `build --examples` reports the three examples cached and rebuilds nothing; a generator
    edited, the same build's up-to-date test finds every one of them stale (the rebuild itself:
    the next test, on small worlds)."""
    src = _engine_copy(tmp_path)
    package = src / "worldfactory"
    data = tmp_path / "data"
    shutil.copytree(worlds_dir, data / "worlds")
    if (worlds_dir.parent / "catalog").is_dir():  # its rows too: a cached world's rows are then not rewritten
        shutil.copytree(worlds_dir.parent / "catalog", data / "catalog")
    cli = package / "cli.py"
    text = cli.read_text()
    assert "rebuild even when up to date" in text
    cli.write_text(text.replace("rebuild even when up to date", "rebuild even when current"))
    for name in NOT_WORLD_CODE:
        for path in _module_files(package, name):
            _touch(path)
    before = {w: (data / "worlds" / w / "world.json").stat().st_mtime_ns for w in EXAMPLES}
    assert _build_examples(src, data) == dict.fromkeys(EXAMPLES, True)
    assert {w: (data / "worlds" / w / "world.json").stat().st_mtime_ns for w in EXAMPLES} == before
    _touch(package / "generate" / "tools.py")
    seen = _current(src, data)
    assert seen["engine"] != engine_fingerprint()  # the copy's code is what ran
    assert seen["current"] == dict.fromkeys(EXAMPLES, False)


def test_a_generator_change_rebuilds_the_examples(tmp_path: Path, small_templates: Path, small_data: Path) -> None:
    """The small template set's examples, built, then a generator edited in a copy of the engine: `build
    --examples` rebuilds every one; a comment changes no byte of a world but the recorded fingerprint (in
    world.json and on the world's page)."""
    src = _engine_copy(tmp_path)
    data = tmp_path / "data"
    shutil.copytree(small_data, data, ignore=shutil.ignore_patterns(".built-*", "build"))
    examples = load_templates(small_templates).catalog.examples
    assert examples and set(examples) <= set(SMALL)
    ts = load_templates(small_templates)
    assert all(is_up_to_date(data / "worlds" / w, inputs_fingerprint(ts, w, data / "briefs")) for w in examples)
    _touch(src / "worldfactory" / "generate" / "tools.py")
    assert _build_examples(src, data, small_templates) == dict.fromkeys(examples, False)
    for wid in examples:  # the same world, with the new fingerprint in world.json and on its page
        old, new = small_data / "worlds" / wid, data / "worlds" / wid
        manifest, rebuilt = (json.loads((f / "world.json").read_text()) for f in (old, new))
        was, now = manifest.pop("inputs_fingerprint"), rebuilt.pop("inputs_fingerprint")
        assert was != now
        page = (old / "index.html").read_text()
        assert was in page and page.replace(was, now) == (new / "index.html").read_text(), wid
        del manifest["files"]["index.html"], rebuilt["files"]["index.html"]
        assert rebuilt == manifest, wid
        names = sorted(p.name for p in old.iterdir() if p.is_file())
        assert names == sorted(p.name for p in new.iterdir() if p.is_file())
        assert [n for n in names if n not in ("world.json", "index.html") and
                (old / n).read_bytes() != (new / n).read_bytes()] == []

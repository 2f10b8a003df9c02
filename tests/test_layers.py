"""Layers that import one way, read from the sources (deferred imports included): the layer order of
tests/import_graph.py's LAYERS, the back edges and circles still allowed (each listed once, here, so the
move that dissolves the circle can shrink the lists to nothing), and the rules that hold already and
allow no exception. Planting one back edge, a rule's breach or a new circle in a copy of the sources
makes each check fail.

The engine-never-imports-Dagster check of the installed packages (a fresh process importing every
engine module) is tests/test_stages.py's; this file reads the import statements.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from tests.import_graph import (
    DAGSTER_FOLDERS,
    DAGSTER_LOCATION,
    ENGINE,
    RANK,
    ROOT,
    Graph,
    back_edges,
    circles,
    import_graph,
    layer_of,
    module_files,
)
from worldfactory.fingerprints import NOT_WORLD_CODE

# The imports that still go up the layer order: none now (docs/architecture.md says how the last ones went).
# The test fails when one is added and when a listed one is gone: the list only shrinks.
BACK_EDGES: frozenset[tuple[str, str]] = frozenset()

# The circles allowed to remain: none now but two modules of one folder (a pair that belongs together), which
# layer_problems allows. A new circle fails; one listed here must still exist as listed.
KNOWN_CIRCLES: tuple[frozenset[str], ...] = ()

WORLD_BUILDING = ("core", "inputs", "runtime", "confine", "play", "catalog", "build")  # what the fingerprint hashes
RUNTIME_NEVER = ("worldfactory.generate", "worldfactory.stages", "worldfactory.drafting", "worldfactory.cli",
                 "worldfactory.site", "worldfactory.adapters", "worldfactory.images", "worldfactory.env",
                 DAGSTER_LOCATION)


# Imports that break a rule below, merged before the rule existed: none now (serve --openenv's app is handed to
# the runtime's control plane by the CLI: runtime.control register_mount). Nothing may be added here.
RULE_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(f"{prefix}.") or (
        prefix == "worldfactory.cli" and module.startswith("worldfactory.cli_"))


def _left_out(module: str) -> bool:
    """Whether a module lies in what the engine fingerprint leaves out (NOT_WORLD_CODE)."""
    return any(_under(module, f"{ENGINE}.{name}") for name in NOT_WORLD_CODE)


def one_way_breaches(graph: Graph) -> list[str]:
    """The imports that break a rule that already holds; BACK_EDGES does not excuse them (RULE_EXCEPTIONS
    lists the one that was there first)."""
    out = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets - {e[1] for e in RULE_EXCEPTIONS if e[0] == a}):
            if layer_of(a) == "runtime" and any(_under(b, p) for p in RUNTIME_NEVER):
                out.append(f"{a} -> {b}: the runtime serves a bundle; it never imports the build, drafting or an app")
            if layer_of(a) in WORLD_BUILDING and _left_out(b):
                out.append(f"{a} -> {b}: a world-building module imports code the engine fingerprint leaves out")
            if _under(b, f"{ENGINE}.drafting") and RANK[layer_of(a)] < RANK["drafting"]:
                out.append(f"{a} -> {b}: drafting is a step above the build; nothing below it imports it (the "
                           f"build reads a recorded draft through worldfactory.drafts)")
            if b.startswith(DAGSTER_LOCATION) and layer_of(a) not in ("dagster", "cli"):
                out.append(f"{a} -> {b}: only the CLI reaches the Dagster code location")
    return out


def _same_folder_pair(circle: list[str]) -> bool:
    return len(circle) == 2 and len({m.rpartition(".")[0] for m in circle}) == 1


def layer_problems(graph: Graph, allowed: frozenset[tuple[str, str]] = BACK_EDGES) -> list[str]:
    """Everything wrong with an import graph's layering, as messages (empty when it is as allowed)."""
    found = back_edges(graph)
    problems = [f"back edge {a} ({layer_of(a)}) -> {b} ({layer_of(b)}): import down the order, or move the "
                f"module (tests/import_graph.py LAYERS)" for a, b in sorted(found - allowed)]
    problems += [f"{a} -> {b} no longer goes up the order: remove it from BACK_EDGES" for a, b in
                 sorted(allowed - found)]
    problems += one_way_breaches(graph)
    problems += [f"{a} -> {b} is gone: remove it from RULE_EXCEPTIONS" for a, b in sorted(RULE_EXCEPTIONS)
                 if b not in graph.get(a, set())]
    for circle in circles(graph):
        if not _same_folder_pair(circle) and not any(set(circle) <= known for known in KNOWN_CIRCLES):
            problems.append(f"a new or larger circle of {len(circle)} modules: {', '.join(circle)}")
    return problems


def test_every_module_has_a_layer_and_imports_go_down_the_order() -> None:
    graph = import_graph()
    assert len(graph) > 100 and {layer_of(m) for m in graph} >= {"core", "runtime", "build", "dagster", "cli"}
    assert layer_problems(graph) == []


def test_known_circles_are_todays() -> None:
    """The allowance is no larger than what is there: every listed circle still exists as listed (shrink
    the list when a circle shrinks)."""
    today = [set(c) for c in circles(import_graph())]
    for known in KNOWN_CIRCLES:
        assert known in today, f"a circle in KNOWN_CIRCLES has changed: now {[c for c in today if c & known]}"


def _copy(tmp_path: Path) -> Path:
    """A copy of the engine's and the Dagster code location's sources, to plant faults in."""
    for folder in (ENGINE, *DAGSTER_FOLDERS):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert set(module_files(tmp_path)) == set(module_files())
    return tmp_path


def _plant(root: Path, module: str, code: str) -> None:
    """Append a function whose body imports (a deferred import, the kind that hides a circle)."""
    path = module_files(root)[module]
    path.write_text(path.read_text() + f"\n\ndef _planted() -> None:\n    {code}\n")


def test_a_planted_back_edge_fails(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert layer_problems(import_graph(root)) == []
    _plant(root, "worldfactory.safe_text", "from worldfactory.boundary import choose  # noqa: F401")
    assert layer_problems(import_graph(root)) == [
        "back edge worldfactory.safe_text (core) -> worldfactory.boundary (confine): import down the order, or move "
        "the module (tests/import_graph.py LAYERS)"]


def test_a_cut_back_edge_must_leave_the_list() -> None:
    """BACK_EDGES only shrinks: an exception whose import is gone is reported, so the list stays true."""
    allowed = BACK_EDGES | {("worldfactory.spec", "worldfactory.catalog")}
    assert layer_problems(import_graph(), allowed) == [
        "worldfactory.spec -> worldfactory.catalog no longer goes up the order: remove it from BACK_EDGES"]


def test_a_planted_breach_of_a_one_way_rule_fails_even_when_listed(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _plant(root, "worldfactory.runtime.diff", "from worldfactory.stages.core import StageError  # noqa: F401")
    _plant(root, "worldfactory.generate.tools", "from worldfactory.site import main  # noqa: F401")
    _plant(root, "worldfactory.rollouts", "import worldfactory_dagster.pipelines.runner  # noqa: F401")
    _plant(root, "worldfactory.stages.brief", "from worldfactory.drafting.step import draft_brief  # noqa: F401")
    graph = import_graph(root)
    breaches = one_way_breaches(graph)
    assert any(b.startswith("worldfactory.runtime.diff -> worldfactory.stages.core: the runtime") for b in breaches)
    assert any(b.startswith("worldfactory.generate.tools -> worldfactory.site: a world-building") for b in breaches)
    assert any(b.startswith("worldfactory.rollouts -> worldfactory_dagster.pipelines.runner: only the CLI")
               for b in breaches)
    assert "worldfactory.stages.brief -> worldfactory.drafting.step: drafting is a step above the build; nothing " \
        "below it imports it (the build reads a recorded draft through worldfactory.drafts)" in breaches
    listed = BACK_EDGES | back_edges(graph)  # listing the edges as exceptions does not excuse them
    assert [p for p in layer_problems(graph, listed) if "circle" not in p] == breaches and len(breaches) == 5


def test_a_planted_circle_fails(tmp_path: Path) -> None:
    """Two modules of one folder importing each other are allowed; a third one closing the ring is not."""
    root = _copy(tmp_path)
    _plant(root, "worldfactory.runtime.answers", "from worldfactory.runtime import http_guards  # noqa: F401")
    _plant(root, "worldfactory.runtime.http_guards", "from worldfactory.runtime import answers  # noqa: F401")
    assert layer_problems(import_graph(root)) == []  # a pair in one folder
    _plant(root, "worldfactory.runtime.http_guards", "from worldfactory.runtime import toolkit  # noqa: F401")
    _plant(root, "worldfactory.runtime.toolkit", "from worldfactory.runtime import answers  # noqa: F401")
    assert layer_problems(import_graph(root)) == [
        "a new or larger circle of 3 modules: worldfactory.runtime.answers, worldfactory.runtime.http_guards, "
        "worldfactory.runtime.toolkit"]


# What the confine layer's job runner must never test by string: the names of the layers above's stages,
# policies and jobs (they register their jobs, errors and needs: confine.register_job, Stage.make_here).
ABOVE_CONFINE_NAMES = ("stage", "rollouts", "task_rollouts", "oracle", "null", "random", "noisy", "openai")


def names_from_above(source: str) -> list[str]:
    """The string constants of a confine-layer source (docstrings aside) that name a stage, policy or job above."""
    from worldfactory.stages import STAGES

    names = {*ABOVE_CONFINE_NAMES, *(s.name for s in STAGES)}
    tree = ast.parse(source)
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return sorted({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and id(n) not in docs and n.value in names})


def test_the_confine_layer_names_nothing_above_it() -> None:
    """confine.py is a generic job runner: no stage, policy or rollout name in it, as the issue asks; a planted
    `"openai"` test or a stage's name is caught."""
    files = module_files()
    for module in sorted(m for m in files if layer_of(m) == "confine"):
        assert names_from_above(files[module].read_text()) == [], module
    source = files["worldfactory.confine"].read_text()
    planted = source + ('\n\ndef _planted(cfg, stage):\n'
                        '    return cfg.policy != "openai" and stage.name == "task_rollouts"\n')
    assert names_from_above(planted) == ["openai", "task_rollouts"]

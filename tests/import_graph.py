"""The project's import graph, read from the sources (deferred imports in function bodies included), and
its circles (strongly connected components).

The layer-order test (tests/test_layers.py) and the fingerprint's closure check (tests/test_fingerprints.py)
read it; `python -m tests.import_graph` prints the circles, largest first, for the audit in
docs/architecture.md. An edge is a module naming another in an import statement, resolved to the
deepest module the statement names (`from worldfactory.generate import tools` is an edge to
worldfactory.generate.tools, `from worldfactory.spec import WorldSpec` one to worldfactory.spec); the
package `__init__` that Python runs on the way is not an edge, so a package and its own modules do not
make a circle by themselves.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = "worldfactory"
DAGSTER_LOCATION = "worldfactory_dagster"
DAGSTER_FOLDERS = ("pipelines", "assets", "resources")  # installed as worldfactory_dagster.<folder> (setup.py)

Graph = dict[str, set[str]]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the engine and of the Dagster code location, by dotted name, to its source file."""
    folders = {ENGINE: ENGINE, **{f"{DAGSTER_LOCATION}.{f}": f for f in DAGSTER_FOLDERS}}
    out: dict[str, Path] = {}
    for name, folder in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((name, *parts))] = path
    return out


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name a source file's import statements name, relative imports resolved, deferred
    imports included: `from a.b import c` names a.b.c (a module, or an attribute of a.b)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *([node.module] if node.module else [])])
            found |= {base if a.name == "*" else f"{base}.{a.name}" for a in node.names}
    return found


def resolve(name: str, modules: Iterable[str]) -> str | None:
    """The deepest project module a dotted name lies in, or None for a name outside the project."""
    known = set(modules)
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return ".".join(parts[:i])
    return None


def import_graph(root: Path = ROOT) -> Graph:
    """module -> the project modules it imports (never itself)."""
    files = module_files(root)
    graph: Graph = {}
    for module, path in files.items():
        targets = {resolve(n, files) for n in imported_names(path, module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


# The layer order, lowest first, and which of today's modules belongs to each (by dotted prefix; the longest
# prefix wins). docs/architecture.md shows the same table; tests/test_layers.py holds the code to it. A module
# may import its own layer and the layers below; an import upward is a back edge.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("worldfactory", "worldfactory.spec", "worldfactory.expressions", "worldfactory.fill",
              "worldfactory.safe_text", "worldfactory.ports", "worldfactory.run_size", "worldfactory.data_root",
              "worldfactory.dates", "worldfactory.catalog_files", "worldfactory.draws")),
    ("inputs", ("worldfactory.templates", "worldfactory.packs", "worldfactory.packsql", "worldfactory.seeds",
                "worldfactory.briefs", "worldfactory.variants", "worldfactory.registry", "worldfactory.fingerprints",
                "worldfactory.pack_flow", "worldfactory.constraints", "worldfactory.drafts",
                "worldfactory.row_bounds", "worldfactory.template_files")),
    ("runtime", ("worldfactory.runtime", "worldfactory.sandbox", "worldfactory.requester")),
    ("confine", ("worldfactory.boundary", "worldfactory.landlock", "worldfactory.confine", "worldfactory.tool_probes")),
    # generate/careless.py is the careless policy's plans (the build's validity check replays them too)
    ("play", ("worldfactory.policies", "worldfactory.rollouts", "worldfactory.evals",
              "worldfactory.generate.careless")),
    ("catalog", ("worldfactory.catalog",)),
    ("build", ("worldfactory.stages", "worldfactory.generate", "worldfactory.audit", "worldfactory.parallel")),
    ("drafting", ("worldfactory.drafting", "worldfactory.dryrun")),  # a pack proven with the build's stages
    ("apps", ("worldfactory.site", "worldfactory.env", "worldfactory.adapters", "worldfactory.images",
              "worldfactory.module_reference", "worldfactory.evals.pages")),  # evals/pages.py: the runs' HTML
    ("dagster", (DAGSTER_LOCATION,)),
    ("cli", ("worldfactory.cli", "worldfactory.cli_audit", "worldfactory.cli_eval", "worldfactory.errors")),
)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str:
    """The layer a module belongs to: the one naming the longest prefix of it."""
    best = max(((prefix, name) for name, prefixes in LAYERS for prefix in prefixes
                if module == prefix or (prefix != ENGINE and module.startswith(f"{prefix}."))),
               key=lambda p: len(p[0]), default=None)
    if best is None:
        raise KeyError(f"{module}: in no layer of tests/import_graph.py LAYERS; add it where it belongs")
    return best[1]


def back_edges(graph: Graph) -> set[tuple[str, str]]:
    """Every import that goes up the layer order: (importer, imported)."""
    return {(a, b) for a, targets in graph.items() for b in targets if RANK[layer_of(b)] > RANK[layer_of(a)]}


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module, largest first (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def deferred_share(root: Path = ROOT) -> tuple[int, int]:
    """(imports of project modules inside function bodies, all imports of project modules): statements."""
    deferred = total = 0
    for path in module_files(root).values():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if getattr(node, "level", 0) or any(n.split(".")[0] in (ENGINE, DAGSTER_LOCATION) for n in names):
                    total += 1
                    deferred += id(node) not in top and not _in_type_checking(tree, node)
    return deferred, total


def _in_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    """Whether an import sits under a module-level `if TYPE_CHECKING:` (never run: not a deferred import)."""
    return any(isinstance(s, ast.If) and "TYPE_CHECKING" in ast.unparse(s.test) and
               any(n is node for n in ast.walk(s)) for s in tree.body)


def main(argv: list[str]) -> int:
    """Print the circles of the import graph, largest first, the share of deferred imports and the back edges.

    `python -m tests.import_graph [ROOT]`: ROOT is a checkout (default: this one), e.g. an older commit's
    `git archive` output, to compare."""
    root = Path(argv[0]) if argv else ROOT
    graph = import_graph(root)
    found = circles(graph)
    deferred, total = deferred_share(root)
    edges = sum(len(v) for v in graph.values())
    print(f"{len(graph)} modules, {edges} import edges; {deferred} of {total} project import statements deferred "
          f"({100 * deferred / max(total, 1):.0f}%)")
    print(f"circles (strongly connected components > 1 module): {[len(c) for c in found]}")
    for component in found:
        print(f"\n{len(component)} modules:")
        for module in component:
            inside = sorted(graph[module] & set(component))
            print(f"  {module} -> {', '.join(m.removeprefix('worldfactory.') for m in inside)}")
    up = sorted(back_edges(graph), key=lambda e: (RANK[layer_of(e[0])], e))
    print(f"\n{len(up)} back edges (an import up the layer order):")
    for a, b in up:
        print(f"  {layer_of(a)} -> {layer_of(b)}: {a} -> {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

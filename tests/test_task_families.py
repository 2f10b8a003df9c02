"""Task families are one shape: each family module declares what the shared driver needs, every
family module runs, and no module of the task package reaches into another's private names."""

from __future__ import annotations

import ast
import random
from pathlib import Path

from worldfactory.generate import tasks
from worldfactory.generate.tasks import FAMILIES
from worldfactory.generate.tasks.driver import FAMILY_DECLARES, Pools, Stream, draw, take

PACKAGE = Path(tasks.__file__).parent
SHARED = {"__init__", "builder", "clock", "driver", "words"}
PASSES = {"coverage"}  # run after the families; may plan with a family's own plan()
TASK_FAMILIES = {"lookup_act", "conditional", "bulk", "workflow", "retrieval", "decline", "discover",
                 "handbook", "ask", "inbox"}


def test_every_family_declares_what_the_driver_needs() -> None:
    for family in FAMILIES:
        missing = [name for name in FAMILY_DECLARES if not hasattr(family, name)]
        assert not missing, f"{family.__name__} lacks {missing}"
        assert family.FAMILY in TASK_FAMILIES, family.__name__
        assert isinstance(family.QUOTA, int) and family.QUOTA > 0, family.__name__
        assert family.TRIES is None or (isinstance(family.TRIES, int) and family.TRIES > 0), family.__name__
        assert callable(family.candidates) and callable(family.plan), family.__name__


def test_every_family_module_runs_once() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")} - SHARED - PASSES
    names = [f.__name__.rsplit(".", 1)[-1] for f in FAMILIES]
    assert sorted(names) == sorted(modules)
    assert len(set(names)) == len(names)


def _private_uses(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"import {a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"line {node.lineno}: .{node.attr}")
    return found


def test_no_module_reaches_into_private_names() -> None:
    assert len(_private_uses(ast.parse("from .builder import _rows\nb._take(pools, 3)\nself._x"))) == 2
    for path in sorted(PACKAGE.glob("*.py")):
        assert not _private_uses(ast.parse(path.read_text())), (path.name, _private_uses(ast.parse(path.read_text())))


def test_families_import_only_shared_modules() -> None:
    families = {p.stem for p in PACKAGE.glob("*.py")} - SHARED - PASSES
    for name in families:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                assert node.module in SHARED - {"__init__"}, (name, node.module)  # never another family
            if (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.startswith("worldfactory.generate.tasks")):
                raise AssertionError(f"{name} imports {node.module}: families use the shared modules relatively")


def test_draw_orders() -> None:
    """Pools: each shuffled, then popped round-robin up to the limit; a stream: shuffled once, in order."""
    pools = [[1, 2, 3], [4], [5, 6]]
    rng, twin = random.Random(7), random.Random(7)
    copies = [list(p) for p in pools]
    for p in copies:
        twin.shuffle(p)
    expected = [copies[0][-1], copies[1][-1], copies[2][-1], copies[0][-2], copies[2][-2]]
    assert draw(rng, Pools([list(p) for p in pools]), 5) == expected
    assert take(random.Random(1), [[], []], 3) == []
    items = list(range(10))
    twin.shuffle(items)
    assert draw(rng, Stream(list(range(10))), 4) == items[:4]
    assert draw(rng, Stream([3, 1, 2], shuffle=False), None) == [3, 1, 2]

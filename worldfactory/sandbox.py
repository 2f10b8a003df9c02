"""The static check of generated tool code, and the probe calls that prove a world's tools.

Layers: a static check of tools.py (an allowlist of exactly the imports, syntax, attributes and
builtins the generator emits; World runs it on every load too), then every tool's probe calls
(run_probes), which worldfactory/tool_probes.py runs in the confined worker (the confine layer
above this runtime one).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
from typing import Any

# The static check is an allowlist of exactly what build/tools.py emits: these imports, these
# syntax nodes, these attributes (ToolDB's methods and dict.items), these builtins. Anything
# else (another import, a dunder, `typing.sys`, getattr, a loop, a lambda, a class) is refused.
ALLOWED_IMPORTS = {"__future__": {"annotations"}, "typing": {"Any", "Literal"},
                   "worldfactory.runtime.toolkit": {"ToolDB", "ToolError", "tool"}}
ALLOWED_NODES = {"Module", "Expr", "ImportFrom", "alias", "Assign", "FunctionDef", "arguments", "arg", "Return",
                 "If", "Raise", "Attribute", "BinOp", "BitOr", "Add", "Sub", "USub", "BoolOp", "Or", "And", "Not",
                 "UnaryOp", "Call", "keyword", "Compare", "Is", "IsNot", "Eq", "NotEq", "Lt", "LtE", "Gt", "GtE",
                 "In", "NotIn", "Constant", "Dict", "DictComp", "comprehension", "IfExp", "List", "Tuple", "Name",
                 "Load", "Store", "Subscript"}
ALLOWED_ATTRIBUTES = {"actor", "audit", "calc", "computed", "days_after", "get", "guard", "holds", "insert", "items",
                      "next_code", "require_state", "rule", "search", "today", "update"}
ALLOWED_BUILTINS = {"bool", "dict", "float", "int", "str", "round", "None", "True", "False"}
MODULE_NAMES = {"__all__", "_"}  # the only module-level assignments
_BUILTINS = set(dir(builtins))


class SandboxError(ValueError):
    """Generated code failed a sandbox check; the message says which tool and why."""


_PASSED: set[str] = set()  # sha256 of sources that passed, so each is parsed once per process


def static_check(source: str) -> None:
    """Refuse tools.py unless every import, node, attribute and builtin is one the generator emits."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    if digest in _PASSED:
        return
    _check(source)
    _PASSED.add(digest)


def _check(source: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SandboxError(f"tools.py does not parse: {exc}") from exc

    def bad(node: ast.AST, what: str) -> SandboxError:
        return SandboxError(f"tools.py line {getattr(node, 'lineno', '?')}: {what} is not allowed")

    for node in tree.body:  # module level: the docstring, the imports, two assignments, the tools
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.ImportFrom):
            allowed = ALLOWED_IMPORTS.get(node.module or "", set())
            for a in node.names:
                if a.name not in allowed or a.asname is not None or node.level:
                    raise bad(node, f"import of {a.name} from {node.module}")
            continue
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name) or \
                    node.targets[0].id not in MODULE_NAMES:
                raise bad(node, "a module-level assignment other than __all__")
            continue
        if isinstance(node, ast.FunctionDef):
            decos = node.decorator_list
            if len(decos) != 1 or not (isinstance(decos[0], ast.Call) and isinstance(decos[0].func, ast.Name)
                                       and decos[0].func.id == "tool"):
                raise bad(node, f"function {node.name} without exactly the @tool decorator")
            if node.name.startswith("_") or node.args.vararg or node.args.kwarg or node.args.posonlyargs:
                raise bad(node, f"the signature of {node.name}")
            continue
        raise bad(node, f"a module-level {type(node).__name__}")
    for node in ast.walk(tree):
        kind = type(node).__name__
        if kind not in ALLOWED_NODES:
            raise bad(node, f"syntax '{kind}'")
        if isinstance(node, ast.Attribute) and node.attr not in ALLOWED_ATTRIBUTES:
            raise bad(node, f"attribute '{node.attr}'")
        if isinstance(node, ast.Name):
            if node.id in _BUILTINS and node.id not in ALLOWED_BUILTINS and node.id not in MODULE_NAMES:
                raise bad(node, f"use of '{node.id}'")
            if node.id.startswith("__") and node.id != "__all__":
                raise bad(node, f"name '{node.id}'")
        if isinstance(node, ast.arg | ast.FunctionDef) and (getattr(node, "arg", None) or
                                                            getattr(node, "name", "")).startswith("__"):
            raise bad(node, "a dunder name")
        if isinstance(node, ast.ImportFrom) and node not in tree.body:
            raise bad(node, "an import inside a function")


def run_probes(world: Any) -> dict[str, Any]:
    """Every tool's probes on fresh episodes: valid calls succeed; invalid ones fail, say why, change nothing."""
    failures: list[str] = []
    calls = 0
    for entry in world.tool_manifest:
        name = entry["name"]
        examples = entry.get("examples") or {}
        valid = examples.get("valid")
        if valid is not None:
            with world.episode() as ep:
                res = ep.call(name, valid)
                calls += 1
                if not res.ok:
                    failures.append(f"{name}: valid call {valid} failed: {res.error}")
        for bad in examples.get("invalid", []):
            with world.episode() as ep:
                before = ep.state_key()
                res = ep.call(name, bad["args"])
                calls += 1
                if res.ok:
                    failures.append(f"{name}: invalid call {bad['args']} succeeded")
                elif bad["expect"] not in (res.error or ""):
                    failures.append(f"{name}: error for {bad['args']} was '{res.error}', expected '{bad['expect']}'")
                elif ep.state_key() != before:
                    failures.append(f"{name}: failed call {bad['args']} changed the database")
    return {"tools": len(world.tool_manifest), "calls": calls, "failures": failures}

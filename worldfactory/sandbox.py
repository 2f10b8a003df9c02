"""The static check of generated tool code, and the probe run that proves a world's tools.

Layers: a static check of tools.py (an allowlist of exactly the imports, syntax, attributes and
builtins the generator emits; World runs it on every load too), then every tool's probe calls
in the confined worker (worldfactory.confine: bubblewrap, seccomp, rlimits, audit hook). With
the explicit opt-out (--unconfined) the probes run in a child `python -I -B` with an empty
environment, rlimits and the audit hook, the Python-level layers only.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

# The static check is an allowlist of exactly what build/tools.py emits: these imports, these
# syntax nodes, these attributes (ToolDB's methods and dict.items), these builtins. Anything
# else (another import, a dunder, `typing.sys`, getattr, a loop, a lambda, a class) is refused.
CPU_SECONDS = 60
MEMORY_BYTES = 3 << 30
TIMEOUT_S = 180
ALLOWED_IMPORTS = {"__future__": {"annotations"}, "typing": {"Any", "Literal"},
                   "worldfactory.runtime.toolkit": {"ToolDB", "ToolError", "tool"}}
ALLOWED_NODES = {"Module", "Expr", "ImportFrom", "alias", "Assign", "FunctionDef", "arguments", "arg", "Return",
                 "If", "Raise", "Attribute", "BinOp", "BitOr", "Add", "Sub", "USub", "BoolOp", "Or", "And", "Not",
                 "UnaryOp", "Call", "keyword", "Compare", "Is", "IsNot", "Eq", "NotEq", "Lt", "LtE", "Gt", "GtE",
                 "In", "NotIn", "Constant", "Dict", "DictComp", "comprehension", "IfExp", "List", "Tuple", "Name",
                 "Load", "Store", "Subscript"}
ALLOWED_ATTRIBUTES = {"actor", "audit", "calc", "computed", "get", "guard", "holds", "insert", "items", "next_code",
                      "require_state", "rule", "search", "today", "update"}
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


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    os.setsid()


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


def _child(folder: str) -> None:
    """The unconfined fallback's child: the Python-level layers only (rlimits, the audit hook)."""
    from worldfactory import confine
    from worldfactory.runtime.world import World

    files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
    sys.addaudithook(confine._audit)
    world = World(files)
    print(json.dumps(run_probes(world)))


def check_tools_in_sandbox(folder: Path) -> dict[str, Any]:
    """Static check, then the probe run confined; raises SandboxError on any failure.

    Confined means in the worker of worldfactory.confine (bubblewrap, seccomp, rlimits, audit
    hook); with the explicit opt-out, a child `python -I` with rlimits and the audit hook.
    """
    from worldfactory import confine

    static_check((folder / "tools.py").read_text())
    if confine.inside() or confine.confined_here():
        files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        report = confine.run_job("probes", files=files)
    else:
        report = _probes_in_child(folder)
    if report["failures"]:
        raise SandboxError(f"{len(report['failures'])} tool probes failed: " + "; ".join(report["failures"][:5]))
    return report


def _probes_in_child(folder: Path) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [sys.executable, "-I", "-B", "-m", "worldfactory.sandbox", str(folder.resolve())],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env, preexec_fn=_limits, cwd=str(folder.resolve()),
    )
    if proc.returncode != 0:
        raise SandboxError(f"sandbox child exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    _child(sys.argv[1])

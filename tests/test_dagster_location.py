"""The Dagster code location installs under the project's own name: pipelines/, assets/ and resources/
stay at the top of the repository, but site-packages gets `worldfactory_dagster.*`, never a generic
top-level `assets`, `resources` or `pipelines` that another project's imports would pick up."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT

GENERIC = ("assets", "resources", "pipelines")
OUTSIDE = """
import importlib, importlib.util, json, sys
found, users = {}, {}
for name in ("assets", "resources", "pipelines"):
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    found[name] = spec.origin if spec is not None else None
sys.path.insert(0, sys.argv[1])  # a user's own modules by those names, as another project would have them
for name in ("assets", "resources", "pipelines"):
    users[name] = importlib.import_module(name).MARK
import worldfactory_dagster.pipelines.definitions as definitions
import worldfactory_dagster.pipelines.runner as runner
print(json.dumps({"found": found, "users": users, "definitions": definitions.__file__, "runner": runner.__file__,
                  "job": definitions.defs.resolve_job_def("world_build").name,
                  "workspace": str(runner.workspace_file())}))
"""


def test_generic_names_do_not_resolve_to_ours_outside_the_repository(tmp_path: Path) -> None:
    """From a folder outside the repository, `import resources` (assets, pipelines) finds nothing of
    ours; a user's own modules by those names are what the import gets, while the code location loads
    beside them by its installed name, with the CLI's driver."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["DAGSTER_HOME"] = str(tmp_path / "home")
    user = tmp_path / "user"
    (user / "resources").mkdir(parents=True)  # a package, and two plain modules
    marks = {name: f"the user's {name}" for name in GENERIC}
    (user / "resources" / "__init__.py").write_text(f"MARK = {marks['resources']!r}\n")
    for name in ("assets", "pipelines"):
        (user / f"{name}.py").write_text(f"MARK = {marks[name]!r}\n")
    r = subprocess.run([PYTHON, "-c", OUTSIDE, str(user)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    ours = {name: origin for name, origin in out["found"].items() if origin and str(ROOT) in origin}
    assert not ours, f"generic top-level names resolve to this project's folders: {ours}"
    assert out["users"] == marks
    assert Path(out["definitions"]).parent == ROOT / "pipelines"
    assert Path(out["runner"]).parent == ROOT / "pipelines" and out["job"] == "world_build"
    assert Path(out["workspace"]) == ROOT / "workspace.yaml"


def test_the_distribution_lists_only_project_named_top_level_packages() -> None:
    """What a wheel (or an image's install) puts into site-packages: worldfactory and worldfactory_dagster."""
    from distutils.core import run_setup

    cwd = Path.cwd()
    try:
        os.chdir(ROOT)
        dist = run_setup("setup.py", stop_after="init")
    finally:
        os.chdir(cwd)
    packages = list(dist.packages or [])
    assert {p.split(".")[0] for p in packages} == {"worldfactory", "worldfactory_dagster", "worldfactory_verifiers"}
    assert {p.split(".")[1] for p in packages if p.startswith("worldfactory_dagster.")} == set(GENERIC)
    assert "worldfactory.stages" in packages  # subpackages are found, not listed by hand
    for name in GENERIC:
        assert (ROOT / dist.package_dir[f"worldfactory_dagster.{name}"] / "__init__.py").is_file()
    assert "worldfactory_dagster.pipelines.definitions" in (ROOT / "workspace.yaml").read_text()


def test_no_source_imports_the_folders_by_their_bare_names() -> None:
    """`from pipelines.runner import ...` would still work from the repository's root (it is on sys.path
    there) but load a second copy of the code location beside worldfactory_dagster.*: every import of
    the Dagster folders goes through the installed name."""
    bare = []
    for folder in ("worldfactory", *GENERIC, "tests", "bench", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                bare += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in GENERIC]
    assert not bare, bare

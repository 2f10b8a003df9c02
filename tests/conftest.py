"""Shared fixtures: the three example worlds, built once per test run into a temp folder that every
xdist worker reads, and a small template set for tests of the pipeline's mechanics."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = load_templates().catalog.examples
PYTHON = sys.executable

# Some environments set PYTHONDONTWRITEBYTECODE=1. Then no run caches anything: every xdist worker
# rewrites the asserts of the test modules and of the plugins' modules (hypothesis, anyio: ~160 modules,
# 7.4 CPU s of collection per worker instead of 4.0), and every subprocess a test starts compiles
# pipelines/, assets/, resources/ and tests/ again. The test run caches bytecode (into __pycache__/,
# which git ignores): the workers and the subprocesses inherit this environment. Generated world code
# runs confined with `python -I -B` and writes nothing either way.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    """A background job of a non-interactive shell (`make test &` in a script) starts with SIGINT ignored,
    and every process a test starts inherits that. Dagster maps SIGTERM to SIGINT's disposition
    (dagster._utils.interrupts), so `dagster dev`, and the CLI after a build through Dagster, would then
    ignore the SIGTERM the tests stop them with: a 90-second wait in the Dagster UI test, and servers
    that do not stop. The default handler, as in an interactive shell."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def shared_build(tmp_path_factory: pytest.TempPathFactory, name: str, world_ids: list[str],
                 templates: Path | None = None) -> Iterator[Path]:
    """Worlds built once per test run, into a data folder every xdist worker reads; yields that folder.

    Under xdist the folder sits beside the workers' own temp folders, and each world is built by
    whichever worker takes its lock first, the workers starting at different worlds so that builds run
    side by side. Tests only read it: a test that changes a world works on its own copy. When a
    worker's session ends it checks that every file is as it was when the worlds were built, so a
    test that writes into the shared folder fails."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        root = tmp_path_factory.mktemp(name)
        order = list(world_ids)
    else:
        root = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
        turn = int(worker.removeprefix("gw")) % len(world_ids)
        order = [*world_ids[turn:], *world_ids[:turn]]
    root.mkdir(parents=True, exist_ok=True)
    ts = load_templates(templates) if templates is not None else None
    for wid in order:
        with (root.parent / f"{root.name}-{wid}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the worker dies
            done = root / f".built-{wid}"
            if not done.exists():
                build_world(wid, root, templates=ts)
                done.touch()
    before = _digests(root)
    yield root
    changed = sorted({name for name, _ in set(before.items()) ^ set(_digests(root).items())})
    assert not changed, f"a test wrote into the shared data folder {root}: {changed}"


@pytest.fixture(scope="session")
def worlds_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example worlds, built once per run (see shared_build): <data>/worlds."""
    for root in shared_build(tmp_path_factory, "data", EXAMPLES):
        yield root / "worlds"


@pytest.fixture(scope="session")
def worlds(worlds_dir: Path) -> dict[str, World]:
    return {wid: World.open(worlds_dir / wid) for wid in EXAMPLES}


def small_templates_at(dest: Path) -> Path:
    """tests/small_templates (two one-table domains at a third of the scale) with the project's shared
    modules and vocabulary: a world builds in about two seconds. For sensor, corruption, delete,
    parallel and end-to-end tests, where the pipeline's mechanics matter and not the world's size."""
    shutil.copytree(ROOT / "tests" / "small_templates", dest)
    shutil.copytree(ROOT / "world_templates" / "modules", dest / "modules")
    shutil.copy(ROOT / "world_templates" / "vocabulary.yaml", dest / "vocabulary.yaml")
    return dest


@pytest.fixture(scope="session")
def small_templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_templates_at(tmp_path_factory.mktemp("small") / "templates")


SMALL = ["help-desk.small--v001", "field-service.small--v001"]


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory, small_templates: Path) -> Iterator[Path]:
    """The two small worlds, built once per run (see shared_build): a data folder, worlds/ and catalog/."""
    yield from shared_build(tmp_path_factory, "small-data", SMALL, small_templates)


@pytest.fixture(params=EXAMPLES)
def world(request: pytest.FixtureRequest, worlds: dict[str, World]) -> World:
    return worlds[request.param]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the cores. Many tests spend much of their time waiting (a Dagster
    daemon's tick, a server coming up, a subprocess's imports), and a third worker on 2 cores fills that
    time: 6 min 52 s -> 5 min 43 s for `make test` here. More than that only adds contention."""
    return (os.cpu_count() or 1) + 1


# Scheduling under xdist (`--dist loadgroup --no-loadscope-reorder`, pyproject.toml). A worker takes a
# unit of work (a test, or a group of tests) when it runs short, in collection order, which the list
# below sets: the longest units first, so that no worker is left running a long test after the others
# have finished. Node ID prefixes, by `--durations` on 2 cores; the rest follow in collection order.
# test_dagster_ui mostly waits on the Dagster daemon (a 30-second tick): the other workers use the cores.
LONGEST_FIRST = (
    "tests/test_dagster_ui.py",
    "tests/test_dagster.py::test_every_stage",  # the `built` group: two example worlds through Dagster
    "tests/test_dagster.py::test_cli_build_registers_and_delete_removes",
    "tests/test_serving.py",
    "tests/test_drafting.py",
    "tests/test_cli.py::test_build_show_run",
    "tests/test_fuzz_tools.py",
    "tests/test_dagster_recovery.py",
    "tests/test_rollouts.py::test_openai_loop",
    "tests/trainers/test_adapter_verifiers.py",  # `make test-trainers` (the trainers' own tools)
    "tests/trainers/test_adapter_trl_env.py",  # a scripted multi-turn GRPO run (module-scoped: one worker)
    "tests/trainers/test_adapter_grpo.py",
    "tests/test_target.py",  # evaluation runs and a targeted world built (module-scoped: one worker)
    "tests/test_cli_polish.py::test_ui_stops",
    "tests/test_build_stopped.py",
    "tests/test_eval_runs.py",
    "tests/test_pack_sql.py::test_a_seven_way",
    "tests/test_world_page.py",
    "tests/test_parallel.py::test_engine_jobs",
    "tests/test_build_engine.py::test_same_world",
    "tests/test_validity.py::test_replay",
    "tests/test_variants.py",
    "tests/test_packs.py::test_shipped_packs_check_clean",
    "tests/test_ref_params.py",
    "tests/test_packs.py::test_pack_schema",
    "tests/test_dagster.py",
    "tests/test_cli.py",
    "tests/test_mcp_transports.py",
)


GROUPS_FILE = "worldfactory_groups_file"  # a worker's input: where it writes each test's group
_GROUPS_DIR = pytest.StashKey[Path]()  # on the controller: the folder of those files


def _group(item: pytest.Item) -> str | None:
    """An xdist_group mark's name, or the module's when the test uses a module-scoped fixture (a
    Dagster build, a server, a GRPO run): tests that share one run on one worker, so that the fixture
    is set up once, not once per worker."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    defs = getattr(item, "_fixtureinfo", None)
    for name in item.fixturenames:
        found = defs.name2fixturedefs.get(name) if defs is not None else None
        if found and found[-1].scope == "module":
            return item.nodeid.split("::", 1)[0]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                    len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: collection order within a rank
    target = getattr(config, "workerinput", {}).get(GROUPS_FILE)
    if target is not None:
        groups = {item.nodeid: group for item in items if (group := _group(item)) is not None}
        Path(target).write_text(json.dumps(groups))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """On the xdist controller: each worker writes its test groups to a file GroupScheduling reads."""
    if _GROUPS_DIR not in node.config.stash:
        node.config.stash[_GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="wf-test-groups-"))
    folder = node.config.stash[_GROUPS_DIR]
    node.workerinput[GROUPS_FILE] = str(folder / f"{node.gateway.id}.json")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` as xdist documents it, plus the module-fixture groups above. xdist 3.8's own
    loadgroup stopped grouping under pytest 9.2 (it renames node IDs, which pytest 9.2 no longer
    allows: pytest-xdist issue 1386); this one takes the groups from the workers' files instead."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] = {}

        def schedule(self) -> None:
            folder = config.stash.get(_GROUPS_DIR, None)
            if self.collection is None and folder is not None:
                for path in sorted(folder.glob("*.json")):
                    self.groups = {**self.groups, **json.loads(path.read_text())}
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_GROUPS_DIR, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


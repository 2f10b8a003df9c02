"""The Dagster code location on a real instance: stages, checks, metadata, catalogs, sensor, automation."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from tests.conftest import EXAMPLES, PYTHON, ROOT, SMALL, small_templates_at
from worldfactory.registry import mark_deleted
from worldfactory.run_size import WORLDS_PER_RUN
from worldfactory.stages import STAGES
from worldfactory_dagster.pipelines.automation import range_requests, world_registry_sensor
from worldfactory_dagster.pipelines.definitions import make_definitions
from worldfactory_dagster.pipelines.partitions import RANGE_END, RANGE_START
from worldfactory_dagster.pipelines.runner import root_cause
from worldfactory_dagster.resources.world_store import WorldStore

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

TWO = EXAMPLES[:2]
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
COST_KEYS = ("cpu_seconds", "wall_seconds", "llm_prompt_tokens", "llm_completion_tokens", "cost_usd", "corrections")


def persistent_instance(home: Path) -> dg.DagsterInstance:
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return dg.DagsterInstance.from_config(str(home))


def run_world(defs: dg.Definitions, instance: dg.DagsterInstance, world_id: str) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("world_build").execute_in_process(
        instance=instance, partition_key=world_id, raise_on_error=False, run_config=QUIET)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("dagster")
    store = WorldStore(root=str(base / "data"))
    defs = make_definitions(store)
    instance = persistent_instance(base / "home")
    instance.add_dynamic_partitions("world", TWO)
    results = {wid: run_world(defs, instance, wid) for wid in TWO}
    catalog = defs.resolve_job_def("catalog_refresh").execute_in_process(instance=instance, run_config=QUIET)
    yield {"base": base, "store": store, "defs": defs, "instance": instance, "results": results, "catalog": catalog}
    instance.dispose()


def test_definitions_validate(tmp_path: Path) -> None:
    env = dict(os.environ, DAGSTER_HOME=str(tmp_path))
    r = subprocess.run([PYTHON, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Validation successful for code location worldfactory" in r.stdout + r.stderr


def test_every_stage_materializes_with_cost_metadata_and_passing_checks(built: dict) -> None:
    for wid, res in built["results"].items():
        assert res.success, wid
        checks = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
        assert checks == {c: True for s in STAGES for c in s.checks}
        [fair] = [e for e in res.get_asset_check_evaluations() if e.check_name == "alternatives_valid"]
        fair_counts = fair.metadata["counts"].value
        assert fair.metadata["passed"].value and fair_counts["alternatives_passed"] == fair_counts["alternatives"] > 0
        [validity] = [e for e in res.get_asset_check_evaluations() if e.check_name == "verifiers_valid"]
        counts = validity.metadata["counts"].value  # the proof's details, one JSON value
        assert validity.partition == wid and validity.metadata["world_id"].value == wid
        assert counts["caught_mutant_rate"] == 1.0
        assert counts["mutants"] > counts["mutants_equivalent"] > 0
        for stage in STAGES:
            [mat] = res.asset_materializations_for_node(stage.name)
            assert mat.partition == wid
            meta = {k: v.value for k, v in mat.metadata.items()}
            for key in COST_KEYS:
                assert key in meta, (stage.name, key)
            assert meta["llm_prompt_tokens"] == 0 and meta["cost_usd"] == 0.0 and meta["corrections"] == 0
            assert meta["wall_seconds"] > 0 and meta["cpu_seconds"] > 0
            for name in stage.writes:
                digest = hashlib.sha256((built["store"].work(wid).path / name).read_bytes()).hexdigest()
                assert meta[f"sha256/{name}"] == digest
        [tasks] = res.asset_materializations_for_node("world_tasks")
        assert tasks.metadata["tasks"].value >= 100
        [rollouts] = res.asset_materializations_for_node("task_rollouts")
        served = len(json.loads((built["store"].work(wid).path / "verifiers.json").read_text())["tasks"])
        assert rollouts.metadata["rollouts"].value == 8 * served
        histogram = {k: v.value for k, v in rollouts.metadata.items() if k.startswith("pass_rate ")}
        assert sum(histogram.values()) == served
        [curated] = res.asset_materializations_for_node("curated_tasks")
        kept = curated.metadata["kept"].value
        assert kept + curated.metadata["dropped_all_pass"].value + curated.metadata["dropped_all_fail"].value == served
        assert kept == sum(v for k, v in histogram.items() if k not in ("pass_rate 0", "pass_rate 1"))


def test_dagster_path_writes_the_engine_bytes(built: dict, worlds_dir: Path) -> None:
    """Same world ID and code: the bundle built through Dagster equals the engine-built one, byte for byte."""
    for wid in TWO:
        ours = built["store"].data_root / "worlds" / wid
        engine = worlds_dir / wid
        names = sorted(p.name for p in engine.iterdir())
        assert names == sorted(p.name for p in ours.iterdir())
        for name in names:
            assert (ours / name).read_bytes() == (engine / name).read_bytes(), name


def test_catalogs_are_parquet_that_duckdb_reads(built: dict) -> None:
    assert built["catalog"].success
    root = built["store"].data_root
    for table in ("worlds", "tasks", "costs"):
        for wid in TWO:
            assert list((root / "catalog" / table / f"world_id={wid}").glob("*.parquet")), (table, wid)
    con = duckdb.connect(str(root / "catalog.duckdb"), read_only=True)
    try:
        con.execute(f"SET file_search_path = '{root}'")  # the views' paths are relative to the data root
        worlds = con.execute("SELECT world_id, tasks, oracle_pass, null_pass FROM worlds ORDER BY world_id").fetchall()
        assert [w[0] for w in worlds] == sorted(TWO)
        assert all(w[1] == w[2] and w[3] == 0 for w in worlds)
        for wid, digest in con.execute("SELECT world_id, world_json_sha256 FROM worlds").fetchall():
            assert digest == hashlib.sha256((root / "worlds" / wid / "world.json").read_bytes()).hexdigest()
        stages = con.execute("SELECT count(DISTINCT stage), count(DISTINCT world_id) FROM costs").fetchone()
        assert stages == (len(STAGES), 2)
        n_tasks = con.execute("SELECT count(*) FROM tasks").fetchone()[0]
        assert n_tasks == sum(w[1] for w in worlds)
    finally:
        con.close()
    [mat] = built["catalog"].asset_materializations_for_node("world_catalog")
    assert mat.metadata["tasks/rows"].value == n_tasks and mat.metadata["worlds/worlds"].value == 2


def wf(*args: str, data: Path, home: Path, templates: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WORLDFACTORY_DATA=str(data), DAGSTER_HOME=str(home))
    if templates is not None:
        env["WORLDFACTORY_TEMPLATES"] = str(templates)
    return subprocess.run([PYTHON, "-m", "worldfactory.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_query_cli_answers(built: dict) -> None:
    data, home = built["store"].data_root, built["base"] / "home"
    r = wf("query", "SELECT domain, count(*) AS worlds FROM worlds GROUP BY domain ORDER BY domain", "--json",
           data=data, home=home)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows == [{"domain": wid.split(".")[0], "worlds": 1} for wid in sorted(TWO)]
    text = wf("query", "SELECT family, count(*) AS n FROM tasks GROUP BY family ORDER BY family", data=data,
              home=home)
    assert text.returncode == 0 and "lookup_act" in text.stdout and "row(s)" in text.stdout
    bad = wf("query", "DELETE FROM tasks", data=data, home=home)
    assert bad.returncode == 2 and "only SELECT" in bad.stderr


def test_corrupted_template_fails_its_check_and_stops_that_world_only(tmp_path: Path) -> None:
    templates = small_templates_at(tmp_path / "templates")
    pack = templates / "domains" / "help-desk.yaml"
    pack.write_text(pack.read_text().replace("  - name: requests\n", (
        "  - name: orphan_ledger\n    singular: orphan entry\n    label: memo\n    rows: 5\n    columns:\n"
        "      - {name: memo, gen: company_name}\n  - name: requests\n"), 1))
    broken, fine = SMALL
    store = WorldStore(root=str(tmp_path / "data"), templates_root=str(templates))
    defs = make_definitions(store)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("world", [broken, fine])
        bad = run_world(defs, instance, broken)
        good = run_world(defs, instance, fine)
    assert not bad.success and good.success
    [failed] = [e for e in bad.get_asset_check_evaluations() if not e.passed]
    assert failed.check_name == "schema_loads"
    assert "not connected" in failed.metadata["reason"].value and "orphan_ledger" in failed.metadata["reason"].value
    assert [m.asset_key.path[-1] for m in bad.get_asset_materialization_events()] == ["world_brief", "world_schema"]
    assert not (tmp_path / "data" / "worlds" / broken).exists()
    assert (tmp_path / "data" / "worlds" / fine / "world.json").is_file()
    assert len(good.get_asset_materialization_events()) == len(STAGES)


def test_bundle_refuses_unproven_or_stale_stages(built: dict, tmp_path: Path) -> None:
    """Blocking checks stop a run; across runs, the bundle stage itself refuses stale proofs."""
    src = built["store"].work(TWO[0]).path
    store = WorldStore(root=str(tmp_path / "data"))
    shutil.copytree(src, store.work(TWO[0]).path)
    tasks = store.work(TWO[0]).path / "tasks.jsonl"
    tasks.write_text(tasks.read_text().replace("lookup", "look up", 1))
    defs = make_definitions(store)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("world", [TWO[0]])
        res = defs.resolve_job_def("world_build").execute_in_process(
            instance=instance, partition_key=TWO[0], raise_on_error=False, run_config=QUIET,
            asset_selection=[dg.AssetKey("world_bundle")])
    assert not res.success
    [failure] = res.get_step_failure_events()
    assert "proof of world_tasks is stale" in root_cause(failure.step_failure_data.error)
    assert not (tmp_path / "data" / "worlds" / TWO[0]).exists()


def test_new_worlds_are_built_in_runs_of_consecutive_partitions() -> None:
    """The sensor's runs: ranges of at most the given size, in order, a lone world as a plain partition run."""
    names = [f"w{i}" for i in range(5)]
    runs = range_requests(names, size=2)
    assert [(r.tags.get(RANGE_START), r.tags.get(RANGE_END), r.partition_key) for r in runs] == [
        ("w0", "w1", None), ("w2", "w3", None), (None, None, "w4")]
    assert len({r.run_key for r in runs}) == 3
    assert len(range_requests([f"w{i}" for i in range(2 * WORLDS_PER_RUN + 1)])) == 3


def test_backfills_run_ranges_of_worlds(tmp_path: Path) -> None:
    """Every stage asset splits a backfill into runs of at most WORLDS_PER_RUN worlds (one policy for all,
    so a world's stages stay in one run)."""
    graph = make_definitions(WorldStore(root=str(tmp_path / "data"))).resolve_asset_graph()
    for stage in STAGES:
        policy = graph.get(dg.AssetKey(stage.name)).backfill_policy
        assert policy is not None and policy.max_partitions_per_run == WORLDS_PER_RUN, stage.name


def test_sensor_registers_registry_and_brief_worlds(tmp_path: Path) -> None:
    store = WorldStore(root=str(tmp_path / "data"))
    briefs = tmp_path / "data" / "briefs"
    briefs.mkdir(parents=True)
    (briefs / "harbor-mutual.yaml").write_text(
        "domain: insurance-claims\ncompany_type: regional\ncompany_name: Harbor Mutual\nvariants: 2\n")
    (briefs / "broken.yaml").write_text("domain: insurance-claims\ncompany_type: galactic\n")
    mark_deleted(store.data_root, EXAMPLES[2])
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, resources={"world_store": store})
        result = world_registry_sensor(ctx)
        expected = [*EXAMPLES[:2], "brief.harbor-mutual--v001", "brief.harbor-mutual--v002"]
        [run] = result.run_requests  # one build run over the range of the new partitions, added in this order
        assert (run.tags[RANGE_START], run.tags[RANGE_END]) == (expected[0], expected[-1])
        assert run.job_name in (None, "world_build")
        [add] = result.dynamic_partitions_requests
        assert list(add.partition_keys) == expected
        instance.add_dynamic_partitions("world", list(add.partition_keys))
        again = world_registry_sensor(dg.build_sensor_context(instance=instance, resources={"world_store": store}))
        assert not again.run_requests
        assert "broken.yaml" in again.skip_reason.skip_message and "galactic" in again.skip_reason.skip_message


def test_nightly_rebuild_requests_every_world_at_three(tmp_path: Path) -> None:
    defs = make_definitions(WorldStore(root=str(tmp_path / "data")))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("world", TWO)
        day = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                  evaluation_time=day.replace(hour=2))
        assert first.total_requested == 0
        nightly = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor,
                                                    evaluation_time=day.replace(hour=3, minute=5))
        assert nightly.total_requested == len(TWO) * len(STAGES)
        for stage in STAGES:
            assert set(nightly.get_requested_partitions(dg.AssetKey(stage.name))) == set(TWO)
        later = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=nightly.cursor,
                                                  evaluation_time=day.replace(hour=3, minute=10))
        assert later.total_requested == 0
        for wid in TWO:  # the nightly runs happen: the catalog refresh waits for the bundles
            instance.report_runless_asset_event(dg.AssetMaterialization("world_bundle", partition=wid))
        catalog = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=later.cursor,
                                                    evaluation_time=day.replace(hour=3, minute=35))
        assert catalog.get_num_requested(dg.AssetKey("world_catalog")) == 1


def evaluate_at(defs: dg.Definitions, instance: dg.DagsterInstance, when: dt.datetime,
                cursor: object = None) -> dg.EvaluateAutomationConditionsResult:
    return dg.evaluate_automation_conditions(defs=defs, instance=instance, evaluation_time=when, cursor=cursor)


def requested_worlds(result: dg.EvaluateAutomationConditionsResult) -> dict[str, set[str]]:
    return {s.name: set(result.get_requested_partitions(dg.AssetKey(s.name))) for s in STAGES}


def test_nightly_skips_current_worlds_and_rebuilds_only_a_changed_domain(built: dict, tmp_path: Path) -> None:
    """Each world's data version is its inputs fingerprint: at 03:00 only worlds whose inputs changed
    (or that were never built) are requested, for every stage; a run over a current world does nothing."""
    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", templates)  # same contents, so the built worlds are current
    store = WorldStore(root=built["store"].root, templates_root=str(templates))
    defs = make_definitions(store)
    instance = built["instance"]
    unbuilt = "commerce-operations.startup--v003"
    instance.add_dynamic_partitions("world", [unbuilt])
    try:
        day = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
        first = evaluate_at(defs, instance, day.replace(hour=2))
        nightly = evaluate_at(defs, instance, day.replace(hour=3, minute=5), first.cursor)
        assert requested_worlds(nightly) == {s.name: {unbuilt} for s in STAGES}  # built worlds are skipped
    finally:
        instance.delete_dynamic_partition("world", unbuilt)

    pack = templates / "domains" / "insurance-claims.yaml"
    pack.write_text(pack.read_text() + "\n# a change to this domain pack only\n")
    quiet = evaluate_at(defs, instance, day.replace(hour=3, minute=30), nightly.cursor)
    assert quiet.get_num_requested(dg.AssetKey("world_brief")) == 0  # changed, but waits for 03:00
    next_night = evaluate_at(defs, instance, day.replace(day=2, hour=3, minute=5), quiet.cursor)
    insurance = {w for w in TWO if w.startswith("insurance-claims.")}
    assert insurance and insurance != set(TWO)
    assert requested_worlds(next_night) == {s.name: insurance for s in STAGES}

    unchanged = next(w for w in TWO if w not in insurance)  # a backfill or manual run of it does nothing
    res = defs.resolve_job_def("world_build").execute_in_process(
        instance=instance, partition_key=unchanged, raise_on_error=False, run_config=QUIET)
    assert res.success and not res.get_asset_materialization_events()
    [check] = res.get_asset_check_evaluations()
    assert check.check_name == "brief_valid" and check.passed and check.partition == unchanged
    assert "up to date" in check.metadata["reason"].value
    skipped = {e.step_key for e in res.all_events if e.event_type_value == "STEP_SKIPPED"}
    assert skipped == {s.name for s in STAGES[1:]}


def test_cli_build_registers_and_delete_removes(tmp_path: Path, small_templates: Path) -> None:
    """`build --all --jobs 2`: the registry's two worlds, one run each, in two worker processes, on the
    same instance; then by name, current, so skipped; then deleted; none of them prints Dagster's
    API-stability warnings. (The refusal of a bad brief file before any work is in test_build_all.py.)"""
    from tests.test_cli_polish import STABILITY

    data, home = tmp_path / "data", tmp_path / "home"
    wid, other = SMALL  # tests/small_templates/registry.yaml: these two, in this order
    r = wf("build", "--all", "--jobs", "2", "--json", data=data, home=home, templates=small_templates)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["world_id"] for row in rows] == [wid, other]
    assert all((data / "worlds" / w / "world.json").is_file() for w in SMALL)
    assert all(row["run_id"] and not row["skipped"] for row in rows)
    assert rows[0]["run_id"] != rows[1]["run_id"]
    assert all(0 < row["seconds"] < 600 for row in rows)  # the world's wall time, not the process clock
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        for row in rows:
            assert instance.has_dynamic_partition("world", row["world_id"])
            run = instance.get_run_by_id(row["run_id"])
            assert run is not None and run.is_success and run.tags.get("dagster/partition") == row["world_id"]
        refreshes = instance.get_runs(dg.RunsFilter(job_name="catalog_refresh"))
        assert len(refreshes) == 1 and refreshes[0].is_success  # once, after both worlds
    finally:
        instance.dispose()
    assert (data / "catalog.duckdb").is_file()
    con = duckdb.connect(str(data / "catalog.duckdb"), read_only=True)
    try:
        con.execute(f"SET file_search_path = '{data}'")  # the views' paths are relative to the data root
        assert sorted(w for (w,) in con.execute("SELECT world_id FROM worlds").fetchall()) == sorted([wid, other])
    finally:
        con.close()
    again = wf("build", wid, other, "--jobs", "2", "--json", data=data, home=home, templates=small_templates)
    assert again.returncode == 0 and [row["skipped"] for row in json.loads(again.stdout)] == [True, True]
    instance = dg.DagsterInstance.from_config(str(home))
    try:  # nothing was built or restored: the catalog is as it was, and is not refreshed again
        assert len(instance.get_runs(dg.RunsFilter(job_name="catalog_refresh"))) == 1
    finally:
        instance.dispose()
    gone = wf("delete", wid, data=data, home=home, templates=small_templates)
    assert gone.returncode == 0, gone.stderr
    assert f"worlds/{wid}" in gone.stdout and "Dagster partition" in gone.stdout and f"world_id={wid}" in gone.stdout
    assert not (data / "worlds" / wid).exists() and not list((data / "catalog").glob(f"*/world_id={wid}"))
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert not instance.has_dynamic_partition("world", wid)
    finally:
        instance.dispose()
    again_gone = wf("delete", wid, data=data, home=home)
    assert again_gone.returncode == 2 and f"no world '{wid}'" in again_gone.stderr
    for out in (r, again, gone):
        assert not STABILITY.search(out.stdout + out.stderr) and "Warning" not in out.stderr, out.stderr
    unknown = wf("delete", "not-a-world", data=data, home=home)
    assert unknown.returncode == 2 and "not a world ID" in unknown.stderr

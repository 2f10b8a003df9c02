"""Batched builds (`worldfactory build --batch N`): one Dagster run over a range of world partitions.

Each world's materialization must carry its own metadata (not the batch's), the bundles must be the
engine's bytes, a failed world must be isolated and named, and runs must spread over the workers.
"""

# No `from __future__ import annotations` here: Dagster reads the toy asset's context annotation.
import hashlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from tests.conftest import SMALL, small_templates_at
from worldfactory.fingerprints import world_inputs_fingerprint
from worldfactory.generate.page import PAGE
from worldfactory.stages import STAGES
from worldfactory_dagster.assets.stage import add_partition_metadata
from worldfactory_dagster.assets.versions import stale_worlds
from worldfactory_dagster.pipelines.runner import build_worlds, contiguous_batches, root_cause, world_store

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

BROKEN, FINE = SMALL
# the keys every world's check result carries, whatever the run size and whether it passed
CHECK_KEYS = {"world_id", "passed", "reason", "counts", "path"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh on-disk Dagster instance for build_worlds (it opens DAGSTER_HOME)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


def _latest(instance: dg.DagsterInstance, stage: str, wid: str) -> dg.AssetMaterialization:
    [record] = instance.fetch_materializations(dg.AssetRecordsFilter(dg.AssetKey(stage), asset_partitions=[wid]),
                                               limit=1).records
    assert record.asset_materialization is not None
    return record.asset_materialization


def test_one_run_over_two_worlds_records_each_worlds_own_metadata(tmp_path: Path, home: Path,
                                                                small_templates: Path, small_data: Path) -> None:
    store = world_store(tmp_path / "data", str(small_templates))
    outcomes = build_worlds(SMALL, store, batch=2)
    assert [o.ok for o in outcomes] == [True, True], [o.failure for o in outcomes]
    assert outcomes[0].run_id == outcomes[1].run_id  # one run for both
    for wid in SMALL:  # the engine's bytes
        ours, engine = tmp_path / "data" / "worlds" / wid, small_data / "worlds" / wid
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in engine.iterdir())
        for f in engine.iterdir():
            assert (ours / f.name).read_bytes() == f.read_bytes(), (wid, f.name)
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        _each_worlds_check(instance, outcomes[0].run_id, tmp_path / "data")
        ts = store.templates()
        for wid in SMALL:
            work = store.work(wid)
            costs = work.costs()
            for stage in STAGES:
                mat = _latest(instance, stage.name, wid)
                meta = {k: v.value if hasattr(v, "value") else v for k, v in mat.metadata.items()}
                assert meta["world_id"] == wid and meta["worlds_in_run"] == 2, (stage.name, wid)
                assert meta["inputs_fingerprint"] == world_inputs_fingerprint(ts, wid, store.briefs_dir)
                # its own cost record, not the batch's total
                assert meta["cpu_seconds"] == costs[stage.name].cpu_seconds, (stage.name, wid)
                assert meta["wall_seconds"] == costs[stage.name].wall_seconds, (stage.name, wid)
                for name in stage.writes:
                    if (work.path / name).is_file():
                        digest = hashlib.sha256((work.path / name).read_bytes()).hexdigest()
                        assert meta[f"sha256/{name}"] == digest, (stage.name, wid, name)
        assert stale_worlds(instance, store, SMALL) == []  # the recorded fingerprints make both current
    finally:
        instance.dispose()
    again = build_worlds(SMALL, store, batch=2)
    assert [o.skipped for o in again] == [True, True]


def _each_worlds_check(instance: dg.DagsterInstance, run_id: str, data: Path) -> None:
    """Checks per world partition: one evaluation per world and stage, on its partition, with one metadata
    shape (CHECK_KEYS); the history the UI reads has them per partition; the page is a link and `path`
    the published bundle, not the work folder."""
    logs = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    evals = [entry.dagster_event.event_specific_data for entry in logs]
    # one per world and check (a stage's proof, and each gate it declares), not one per stage
    assert len(evals) == sum(len(s.checks) for s in STAGES) * len(SMALL)
    gates = [e for e in evals if e.check_name == "alternatives_valid"]
    assert sorted(e.partition for e in gates) == sorted(SMALL) and all(e.passed and e.blocking for e in gates)
    for stage in STAGES:
        mine = {e.partition: e for e in evals if e.asset_key == dg.AssetKey(stage.name) and e.check_name == stage.check}
        assert sorted(mine) == sorted(SMALL), stage.name  # each on its own world's partition
        for wid, ev in mine.items():
            assert ev.check_name == stage.check and ev.passed and ev.blocking
            assert set(ev.metadata) == CHECK_KEYS, (stage.name, sorted(ev.metadata))
            assert ev.metadata["world_id"].value == wid
            assert ev.metadata["path"].value == str((data / "worlds" / wid).resolve())
            assert ev.metadata["reason"].value == ""
            # it points at this world's materialization in this run
            assert ev.target_materialization_data is not None
            assert ev.target_materialization_data.run_id == run_id
    # the check history the UI reads: one execution per world, each on its partition, succeeded
    for stage in STAGES:
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey(stage.name), stage.check), limit=10)
        assert sorted(h.partition for h in history) == sorted(SMALL), stage.name
        assert all(h.status == AssetCheckExecutionRecordStatus.SUCCEEDED for h in history), stage.name
    # the world page is a link to the published copy, and `path` the published bundle
    for wid in SMALL:
        [record] = instance.fetch_materializations(
            dg.AssetRecordsFilter(dg.AssetKey("world_bundle"), asset_partitions=[wid]), limit=1).records
        meta = record.asset_materialization.metadata
        page = (data / "worlds" / wid / PAGE).resolve()
        assert isinstance(meta["page"], dg.UrlMetadataValue) and meta["page"].url == page.as_uri()
        assert meta["path"].value == str((data / "worlds" / wid).resolve())
        assert page.is_file()


def test_a_failed_batch_names_the_broken_world_and_builds_the_other(tmp_path: Path, home: Path,
                                                                    small_data: Path) -> None:
    templates = small_templates_at(tmp_path / "templates")
    pack = templates / "domains" / "help-desk.yaml"  # BROKEN's domain: a table no tool or task can use
    pack.write_text(pack.read_text().replace("  - name: requests\n", (
        "  - name: orphan_ledger\n    singular: orphan entry\n    label: memo\n    rows: 5\n    columns:\n"
        "      - {name: memo, gen: company_name}\n  - name: requests\n"), 1))
    store = world_store(tmp_path / "data", str(templates))
    broken, fine = build_worlds([BROKEN, FINE], store, batch=2)
    assert not broken.ok and "world_schema: check schema_loads failed" in broken.failure
    assert "orphan_ledger" in broken.failure
    assert fine.ok and fine.run_id != broken.run_id  # each rebuilt in its own run after the batch failed
    for f in (small_data / "worlds" / FINE).iterdir():  # FINE's inputs do not include the other domain's pack
        assert (tmp_path / "data" / "worlds" / FINE / f.name).read_bytes() == f.read_bytes(), f.name
    assert not (tmp_path / "data" / "worlds" / BROKEN).exists()
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        batch = [r for r in instance.get_runs(dg.RunsFilter(job_name="world_build"))
                 if r.tags.get("dagster/asset_partition_range_start")]
        assert len(batch) == 1 and batch[0].status == dg.DagsterRunStatus.FAILURE
        [failed] = [c for c in instance.all_logs(batch[0].run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
                    if not c.dagster_event.event_specific_data.passed]
        ev = failed.dagster_event.event_specific_data
        assert ev.partition == BROKEN and ev.metadata["world_id"].value == BROKEN  # the broken world's own check
        assert "orphan_ledger" in ev.metadata["reason"].value and FINE not in ev.metadata["reason"].value
        # the same keys as the fine world's check in its own one-world run
        [fine_eval] = [c.dagster_event.event_specific_data for c in
                       instance.all_logs(fine.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
                       if c.dagster_event.event_specific_data.check_name == ev.check_name]
        assert fine_eval.partition == FINE and set(fine_eval.metadata) == set(ev.metadata) == CHECK_KEYS
    finally:
        instance.dispose()


def test_runs_shrink_toward_the_end_so_every_worker_stays_busy() -> None:
    order = [f"w{i:03d}" for i in range(300)]
    runs = contiguous_batches(order[:200], order, 20, jobs=2)
    assert [w for run in runs for w in run] == order[:200]  # every world once, in partition order
    sizes = [len(r) for r in runs]
    assert max(sizes) == 20 and sizes[-1] == 1 and sizes == sorted(sizes, reverse=True)
    assert contiguous_batches(order[:20], order, 20, jobs=1) == [order[:20]]  # one process: one run
    few = contiguous_batches(order[:20], order, 20, jobs=2)
    assert len(few) > 2 and len(few[0]) <= 10  # not one run on one core while the other waits
    gap = contiguous_batches(order[:5] + order[6:9], order, 20, jobs=1)
    assert gap == [order[:5], order[6:9]]  # a range run is contiguous


PARTS = dg.DynamicPartitionsDefinition(name="part")
KEYS = ["a", "b", "c"]


def _toy(extra: str | None) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=PARTS)
    def toy(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        keys = list(context.partition_keys)
        step = getattr(context.op_execution_context, "_step_execution_context", None)
        # the fast path (no per-key range check against the instance) is live on this Dagster
        assert getattr(step, "_metadata_accumulator", None) is not None
        by_key = {k: {"key": k, "n": i} for i, k in enumerate(keys)}
        if extra:
            by_key[extra] = {"key": extra}
        add_partition_metadata(context, keys, by_key)
        return dg.MaterializeResult(metadata={"shared": 1})

    return toy


def test_partition_metadata_lands_on_each_partition_and_only_targeted_ones(tmp_path: Path) -> None:
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        instance.add_dynamic_partitions("part", KEYS)
        tags = {"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "b"}
        res = dg.materialize([_toy(None)], instance=instance, tags=tags)
        mats = {m.partition: m.metadata for m in res.asset_materializations_for_node("toy")}
        assert sorted(mats) == ["a", "b"]
        for i, key in enumerate(["a", "b"]):
            assert (mats[key]["key"].value, mats[key]["n"].value, mats[key]["shared"].value) == (key, i, 1)
        bad = dg.materialize([_toy("c")], instance=instance, tags=tags, raise_on_error=False)
        assert not bad.success
        [failure] = bad.get_step_failure_events()
        assert "does not target: ['c']" in root_cause(failure.step_failure_data.error)


def test_the_image_check_has_the_stages_check_shape(tmp_path: Path) -> None:
    """world_image's check carries the same keys as every stage's, passed or failed (its figures in counts)."""
    from worldfactory.images.probe import ProbeReport
    from worldfactory_dagster.assets.image import image_check_metadata
    from worldfactory_dagster.resources.world_store import WorldStore

    store = WorldStore(root=str(tmp_path))
    ok = image_check_metadata(FINE, ProbeReport(image="i", world_id=FINE, passed=True, tools=12, task_id="t",
                                                bundle_identical=True, first_answer_seconds=1.5), store)
    bad = image_check_metadata(FINE, ProbeReport(image="i", world_id=FINE, passed=False, step="start",
                                                 reason="the container exited"), store)
    assert set(ok) == set(bad) == CHECK_KEYS
    assert ok["reason"].value == "" and "start: the container exited" in bad["reason"].value
    assert ok["counts"].value["tools"] == 12 and ok["path"].value == str((tmp_path / "worlds" / FINE).resolve())

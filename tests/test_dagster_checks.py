"""Asset checks per world partition: one evaluation per world, on its partition, with one metadata shape.

"Did world X pass `oracles_run`?" must be answerable per world in the UI whether X was built alone or
in a batch; the page is a link and the path is the published bundle, not the work folder.
"""

import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from tests.conftest import SMALL
from worldfactory.generate.page import PAGE
from worldfactory.stages import STAGES
from worldfactory_dagster.pipelines.runner import build_worlds, world_store

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

# the keys every world's check result carries, whatever the run size and whether it passed
CHECK_KEYS = {"world_id", "passed", "reason", "counts", "path"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


def test_a_batch_records_each_worlds_check_on_its_partition_with_one_shape(tmp_path: Path, home: Path,
                                                                           small_templates: Path) -> None:
    data = tmp_path / "data"
    store = world_store(data, str(small_templates))
    outcomes = build_worlds(SMALL, store, batch=2)
    assert [o.ok for o in outcomes] == [True, True], [o.failure for o in outcomes]
    assert outcomes[0].run_id == outcomes[1].run_id  # one run over both worlds
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        logs = instance.all_logs(outcomes[0].run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        evals = [entry.dagster_event.event_specific_data for entry in logs]
        assert len(evals) == len(STAGES) * len(SMALL)  # one per world and stage, not one per stage
        for stage in STAGES:
            mine = {e.partition: e for e in evals if e.asset_key == dg.AssetKey(stage.name)}
            assert sorted(mine) == sorted(SMALL), stage.name  # each on its own world's partition
            for wid, ev in mine.items():
                assert ev.check_name == stage.check and ev.passed and ev.blocking
                assert set(ev.metadata) == CHECK_KEYS, (stage.name, sorted(ev.metadata))
                assert ev.metadata["world_id"].value == wid
                assert ev.metadata["path"].value == str((data / "worlds" / wid).resolve())
                assert ev.metadata["reason"].value == ""
                # it points at this world's materialization in this run
                assert ev.target_materialization_data is not None
                assert ev.target_materialization_data.run_id == outcomes[0].run_id
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
    finally:
        instance.dispose()

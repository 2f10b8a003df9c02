"""The eval_run asset on a real Dagster instance: the sensor adds a killed run as a partition, materializing
it finishes the run without playing a finished episode again, and its metadata carries the summary."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from worldfactory.confine import open_world
from worldfactory.evals import runs
from worldfactory.rollouts import RolloutConfig
from worldfactory_dagster.pipelines.automation import eval_run_sensor
from worldfactory_dagster.pipelines.definitions import make_definitions
from worldfactory_dagster.resources.world_store import WorldStore

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

WORLD = "commerce-operations.startup--v001"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def rule_tasks(bundle: Path, n: int) -> list[str]:
    """Tasks a business rule decides (conditional, decline) and a few others: rule_blind fails some of them."""
    world = open_world(bundle)
    decided = [t.task_id for t in world.tasks.values() if t.family in ("conditional", "decline")][:n]
    return decided + [t.task_id for t in world.tasks.values() if t.family == "lookup_act"][:2]


def test_the_sensor_adds_a_killed_run_and_the_asset_finishes_and_summarises_it(
        tmp_path: Path, worlds_dir: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(worlds_dir / WORLD, data / "worlds" / WORLD)
    bundle = data / "worlds" / WORLD
    ids = rule_tasks(bundle, 6)
    cfg = RolloutConfig(policy="rule_blind", k=4)
    played: list[int] = []

    def killed(n: int) -> None:
        played.append(n)
        if len(played) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runs.execute(data, [bundle], cfg, ids, open_world, name="killed", on_done=killed)
    assert not runs.load_run(data, "killed").complete and len(runs.journal(runs.run_dir(data, "killed"))) == 5

    store = WorldStore(root=str(data))
    defs = make_definitions(store)
    with dg.instance_for_test() as instance:
        result = eval_run_sensor(dg.build_sensor_context(instance=instance, resources={"world_store": store}))
        [request] = result.run_requests
        assert request.partition_key == "killed"
        [add] = result.dynamic_partitions_requests
        assert list(add.partition_keys) == ["killed"]
        instance.add_dynamic_partitions("eval_run", ["killed"])
        again = eval_run_sensor(dg.build_sensor_context(instance=instance, resources={"world_store": store}))
        assert not again.run_requests and "no new" in again.skip_reason.skip_message

        run = defs.resolve_job_def("eval_runs").execute_in_process(instance=instance, partition_key="killed",
                                                                   run_config=QUIET)
        assert run.success
        [mat] = [e.event_specific_data.materialization for e in run.get_asset_materialization_events()]
        meta: dict[str, Any] = mat.metadata
    info = runs.load_run(data, "killed")
    assert info.complete and info.episodes == 4 * len(ids)
    # resumed, not replayed: every episode is in the journal once
    keys = [(e["task_id"], e["rollout"]) for e in runs.journal(runs.run_dir(data, "killed"))]
    assert len(keys) == len(set(keys)) == 4 * len(ids)
    assert meta["run_id"].value == "killed" and meta["policy"].value == "rule_blind"
    assert meta["episodes"].value == 4 * len(ids) and 0 < meta["passes"].value < 4 * len(ids)
    assert meta["top_cause"].value == "rule_ignored"
    assert meta["causes"].value["rule_ignored"] >= 1
    assert "| rule_ignored |" in meta["causes_chart"].md_str and "█" in meta["causes_chart"].md_str
    assert "| all |" in meta["families"].md_str and "| conditional |" in meta["families"].md_str
    assert meta["band"].value[WORLD] >= 1  # the weak policy's own band: tasks it passes in some episodes only
    assert meta["config"].value["k"] == 4 and meta["config"].value["tasks"] == ids

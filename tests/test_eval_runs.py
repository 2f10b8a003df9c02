"""Evaluation runs: their own id, folder and catalog rows; the build's rows untouched; resume, rebuild,
compare, delete and a run's own curriculum."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from worldfactory.catalog import publish_world_rows, read_world_rows, rebuild_catalog
from worldfactory.cli import main
from worldfactory.confine import open_world
from worldfactory.evals import runs
from worldfactory.evals.stats import compare, pass_hat_k, wilson
from worldfactory.rollouts import RolloutConfig

WORLD = "commerce-operations.startup--v001"


@pytest.fixture()
def data(tmp_path: Path, worlds_dir: Path) -> Path:
    """A data root with one example world published in it: its bundle and the build's catalog rows."""
    shutil.copytree(worlds_dir / WORLD, tmp_path / "worlds" / WORLD)
    publish_world_rows(tmp_path / "catalog", tmp_path / "worlds" / WORLD)
    return tmp_path


def bundle(data: Path) -> Path:
    return data / "worlds" / WORLD


def tasks(data: Path, n: int) -> list[str]:
    """The first n tasks of the build's band (tasks the noisy policy sometimes fails)."""
    lines = (bundle(data) / "curated_tasks.jsonl").read_text().splitlines()
    return [json.loads(line)["task_id"] for line in lines[:n]]


def eval_run(data: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["eval", "run", str(bundle(data)), "--data", str(data), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def build_files(data: Path) -> dict[str, dict[str, str]]:
    """The build's rollouts and traces files, by content."""
    return {t: digests(data / "catalog" / t) for t in ("rollouts", "traces")}


def test_a_run_keeps_its_own_rows_and_never_touches_the_builds(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    built = read_world_rows(data / "catalog", "rollouts", WORLD)
    before = build_files(data)
    ids = tasks(data, 2)
    info = eval_run(data, "--tasks", ",".join(ids), "-k", "4", capsys=capsys)
    # what `rollouts --tasks a,b -k 4` did to the build: its 8 rows replaced every build episode
    assert read_world_rows(data / "catalog", "rollouts", WORLD) == built and len(built) > 8
    assert build_files(data) == before
    rid = info["run_id"]
    assert info["complete"] and info["episodes"] == 8
    config = json.loads((data / "runs" / rid / "run.json").read_text())["config"]
    assert config["tasks"] == ids and config["k"] == 4 and config["policy"] == "noisy" and config["seed"] == 0
    assert list(config["worlds"]) == [WORLD] and config["code_version"].startswith("worldfactory ")
    rows = read_world_rows(data / "catalog", "run_rollouts", WORLD)
    assert len(rows) == 8 and {r["run_id"] for r in rows} == {rid} and {r["task_id"] for r in rows} == set(ids)
    assert pq.read_table(data / "runs" / rid / "rollouts.parquet").num_rows == 8
    assert [r["run_id"] for r in read_world_rows(data / "catalog", "runs", WORLD)] == [rid]
    traces = read_world_rows(data / "catalog", "run_traces", WORLD)
    assert traces and {r["run_id"] for r in traces} == {rid}
    # another seed is another run; the first keeps its rows
    other = eval_run(data, "--tasks", ",".join(ids), "-k", "4", "--seed", "3", capsys=capsys)
    assert other["run_id"] != rid
    assert sum(r["run_id"] == rid for r in read_world_rows(data / "catalog", "run_rollouts", WORLD)) == 8
    assert build_files(data) == before


def test_the_run_id_follows_the_configuration_and_hides_secrets(data: Path) -> None:
    cfg = RolloutConfig(policy="openai", model="m", base_url="http://user:sk-secret@host:8000/v1?key=sk-2", k=2)
    config = runs.make_config([bundle(data)], cfg, None)
    assert config.base_url == "http://host:8000/v1" and "sk-" not in config.model_dump_json()
    assert runs.run_id_of(config) == runs.run_id_of(runs.make_config([bundle(data)], cfg, None))
    assert runs.run_id_of(config) != runs.run_id_of(runs.make_config([bundle(data)], cfg.model_copy(
        update={"k": 3}), None))
    with pytest.raises(runs.RunError, match="run name"):
        runs.run_id_of(config, "../escape")


def test_a_killed_run_resumes_without_playing_finished_episodes(data: Path, tmp_path_factory: pytest.TempPathFactory,
                                                                 worlds_dir: Path) -> None:
    ids = tasks(data, 3)
    cfg = RolloutConfig(policy="noisy", k=2)
    played: list[int] = []

    def killed(n: int) -> None:
        played.append(n)
        if len(played) == 3:
            raise KeyboardInterrupt

    def opener(b: Path) -> Any:
        return open_world(b)

    with pytest.raises(KeyboardInterrupt):
        runs.execute(data, [bundle(data)], cfg, ids, opener, name="resumed", on_done=killed)
    folder = runs.run_dir(data, "resumed")
    assert len(runs.journal(folder)) == 3 and not runs.load_run(data, "resumed").complete
    with (folder / runs.JOURNAL).open("ab") as f:
        f.write(b'{"world_id": "cut short by the kill')  # a torn last line: its episode runs again
    again: list[int] = []
    info = runs.execute(data, [bundle(data)], cfg, ids, opener, name="resumed", on_done=again.append)
    assert len(again) == 3 and info.complete and info.episodes == 6
    # the same rows as a run that was never killed
    fresh = tmp_path_factory.mktemp("fresh")
    shutil.copytree(worlds_dir / WORLD, fresh / "worlds" / WORLD)
    runs.execute(fresh, [fresh / "worlds" / WORLD], cfg, ids, opener, name="resumed")
    assert pq.read_table(folder / "rollouts.parquet").drop(["world_id"]).to_pylist() == \
        pq.read_table(runs.run_dir(fresh, "resumed") / "rollouts.parquet").drop(["world_id"]).to_pylist()
    with pytest.raises(runs.RunError, match="another configuration"):
        runs.execute(data, [bundle(data)], cfg.model_copy(update={"k": 3}), ids, opener, name="resumed")


def test_rebuild_restores_the_build_and_every_run(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rid = eval_run(data, "--tasks", ",".join(tasks(data, 6)), "-k", "4", "--error-rate", "0.4", "--seed", "7",
                   capsys=capsys)["run_id"]
    catalog = data / "catalog"
    tables = ("rollouts", "runs", "run_rollouts", "run_traces", "bands")
    before = {t: read_world_rows(catalog, t, WORLD) for t in tables}
    shutil.rmtree(catalog)
    assert rebuild_catalog(data) == [WORLD]
    for table, rows in before.items():
        key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
        assert sorted(map(key, read_world_rows(catalog, table, WORLD))) == sorted(map(key, rows)), table
    bands = read_world_rows(catalog, "bands", WORLD)
    assert {r["run_id"] for r in bands} == {"", rid}  # the build's band and the run's, each with its policy
    assert {r["policy"] for r in bands if r["run_id"] == ""} == {"noisy-0.1"}
    assert all(0 < r["pass_rate"] < 1 for r in bands)


def test_delete_removes_one_run_only(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = ",".join(tasks(data, 1))
    a = eval_run(data, "--tasks", ids, "-k", "2", capsys=capsys)["run_id"]
    b = eval_run(data, "--tasks", ids, "-k", "2", "--policy", "oracle", capsys=capsys)["run_id"]
    before = build_files(data)
    assert main(["eval", "delete", a, "--data", str(data)]) == 0
    assert not runs.run_dir(data, a).exists() and runs.list_run_ids(data) == [b]
    assert {r["run_id"] for r in read_world_rows(data / "catalog", "run_rollouts", WORLD)} == {b}
    assert build_files(data) == before
    assert main(["eval", "delete", a, "--data", str(data)]) == 2
    assert f"no evaluation run '{a}'" in capsys.readouterr().err


def test_compare_gives_pass1_and_passk_with_wilson_intervals(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = ",".join(tasks(data, 4))
    noisy = eval_run(data, "--tasks", ids, "-k", "4", "--error-rate", "0.3", capsys=capsys)["run_id"]
    oracle = eval_run(data, "--tasks", ids, "-k", "4", "--policy", "oracle", capsys=capsys)["run_id"]
    capsys.readouterr()
    assert main(["eval", "compare", noisy, oracle, "--data", str(data), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["all"]["b"]["pass1"] == {"passes": 16, "n": 16, "rate": 1.0, "low": 0.8064, "high": 1.0}
    assert table["all"]["b"]["passk"]["n"] == 4 and table["all"]["b"]["passk"]["rate"] == 1.0
    a = table["all"]["a"]
    assert a["pass1"]["n"] == 16 and a["pass1"]["rate"] < 1.0 and a["passk"]["rate"] <= a["pass1"]["rate"]
    assert a["pass1"]["low"] <= a["pass1"]["rate"] <= a["pass1"]["high"]
    episodes = runs.run_episodes(data, noisy)
    assert compare(episodes, episodes)["all"]["a"] == compare(episodes, episodes)["all"]["b"]


def test_wilson_and_pass_hat_k() -> None:
    assert wilson(5, 10).model_dump() == {"passes": 5, "n": 10, "rate": 0.5, "low": 0.2366, "high": 0.7634}
    assert wilson(0, 10).low == 0.0 and wilson(0, 10).high == 0.2775
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(3, 4, 4) == 0.0 and pass_hat_k(2, 4, 1) == 0.5


def test_a_runs_curriculum_is_its_own_band(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from worldfactory.adapters.hf_dataset import export_rows
    from worldfactory.cli_eval import run_bands

    ids = tasks(data, 6)
    rid = eval_run(data, "--tasks", ",".join(ids), "-k", "4", "--error-rate", "0.4", "--seed", "7",
                   capsys=capsys)["run_id"]
    episodes = runs.run_episodes(data, rid)
    rates: dict[str, list[int]] = {}
    for e in episodes:
        rates.setdefault(e["task_id"], []).append(e["reward"] >= 1.0)
    band = {t for t, v in rates.items() if 0 < sum(v) < len(v)}
    assert band and band != set(rates)  # the run's band is not every task it played
    bundles, bands = run_bands(data, rid, None)
    rows = export_rows(bundles, bands=bands)
    assert {r["task_id"] for r in rows} == band
    assert all(r["pass_rate"] == round(sum(rates[r["task_id"]]) / 4, 4) for r in rows)
    catalog = {r["task_id"] for r in read_world_rows(data / "catalog", "bands", WORLD) if r["run_id"] == rid}
    assert catalog == band
    build = {r["task_id"] for r in export_rows([bundle(data)])}
    lines = (bundle(data) / "curated_tasks.jsonl").read_text().splitlines()
    assert build == {json.loads(line)["task_id"] for line in lines}


def test_a_model_run_keeps_each_episode_as_it_ends_and_resumes(data: Path, worlds: dict[str, Any]) -> None:
    """An OpenAI-compatible server (a scripted model on loopback): killed after two episodes, then resumed."""
    from tests.llm_server import LLMServer, ScriptedModel
    from tests.test_rollouts import plans
    from worldfactory.evals.causes import report

    world = worlds[WORLD]
    ids = [t.task_id for t in world.tasks.values() if t.family == "lookup_act" and len(t.oracle) <= 8][:3]
    model = ScriptedModel(plans(world, ids), wrong_rate=0.3)
    played: list[int] = []

    def killed(n: int) -> None:
        played.append(n)
        if len(played) == 3:  # in the middle of the second task
            raise KeyboardInterrupt

    with LLMServer(model) as url:
        cfg = RolloutConfig(policy="openai", model="scripted", base_url=url, api_key="sk-test", k=2, concurrency=1)
        with pytest.raises(KeyboardInterrupt):
            runs.execute(data, [bundle(data)], cfg, ids, open_world, name="model", on_done=killed)
        asked = model.requests
        again: list[int] = []
        info = runs.execute(data, [bundle(data)], cfg, ids, open_world, name="model", on_done=again.append)
    assert len(again) == 3 and info.complete and info.episodes == 6
    episodes = runs.run_episodes(data, "model")
    kept = {(e["task_id"], e["rollout"]) for e in runs.journal(runs.run_dir(data, "model"))[:3]}
    steps = sum(e["steps"] for e in episodes if (e["task_id"], e["rollout"]) not in kept)
    assert model.requests - asked >= steps  # the resumed part asked only for the episodes it played
    assert model.requests - asked < sum(e["steps"] for e in episodes) + 6
    assert "sk-test" not in (runs.run_dir(data, "model") / "run.json").read_text()
    assert info.config.label == "openai-scripted" and info.config.base_url == url
    rep = report("model", episodes, {WORLD: world})
    assert rep.failed == sum(e["reward"] < 1.0 for e in episodes)
    assert set(rep.by_cause) <= {"wrong_record", "rule_ignored", "missing_write", "wrong_value"}


def test_rollouts_is_a_run_of_its_own_even_under_the_builds_policy_label(data: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`rollouts --tasks a,b -k 4` with the build's own policy (noisy-0.1) once cut the build's rows to 8."""
    before = build_files(data)
    built = read_world_rows(data / "catalog", "rollouts", WORLD)
    ids = tasks(data, 2)
    capsys.readouterr()
    assert main(["rollouts", str(bundle(data)), "--tasks", ",".join(ids), "-k", "4", "--data", str(data),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "noisy-0.1" and out["episodes"] == 8 and out["run_id"] in runs.list_run_ids(data)
    assert build_files(data) == before and read_world_rows(data / "catalog", "rollouts", WORLD) == built
    assert [r["run_id"] for r in read_world_rows(data / "catalog", "run_rollouts", WORLD)] == [out["run_id"]] * 8
    # the run's curriculum file is its band, and is what `curated` reported
    curated = runs.curated_tasks(data, out["run_id"])
    assert [(r["task_id"], r["pass_rate"]) for r in curated] == [(r["task_id"], r["pass_rate"])
                                                                 for r in sorted(out["curated"],
                                                                                 key=lambda r: r["task_id"])]
    assert all(r["policy"] == "noisy-0.1" and r["run_id"] == out["run_id"] for r in curated)
    # the same command again is the same run: nothing is played twice
    capsys.readouterr()
    assert main(["rollouts", str(bundle(data)), "--tasks", ",".join(ids), "-k", "4", "--data", str(data),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == out["run_id"]
    assert len(runs.journal(runs.run_dir(data, out["run_id"]))) == 8


@pytest.mark.parametrize("policy", ["rule_blind", "first_write", "name_confuser"])
def test_a_weak_policy_has_a_band_and_the_same_seed_plays_the_same_episodes(
        data: Path, policy: str, tmp_path_factory: pytest.TempPathFactory, worlds_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cfg = RolloutConfig(policy=policy, k=4)
    info = runs.execute(data, [bundle(data)], cfg, None, open_world)
    curated = runs.curated_tasks(data, info.run_id)
    assert curated and all(0 < r["pass_rate"] < 1 for r in curated)  # the habit in some episodes, not all
    summary = json.loads((runs.run_dir(data, info.run_id) / "summary.json").read_text())
    assert summary["band"][WORLD] == len(curated) and summary["policy"] == policy
    weakness = {"rule_blind": "rule_ignored", "first_write": "gave_up", "name_confuser": "wrong_record"}[policy]
    capsys.readouterr()
    assert main(["eval", "show", info.run_id, "--data", str(data), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["top_cause"] == weakness and shown["causes"] == summary["causes"]
    again = tmp_path_factory.mktemp("again")
    shutil.copytree(worlds_dir / WORLD, again / "worlds" / WORLD)
    other = runs.execute(again, [again / "worlds" / WORLD], cfg, None, open_world)
    assert (runs.run_dir(again, other.run_id) / "episodes.jsonl").read_bytes() != b""
    assert runs.run_episodes(again, other.run_id) == runs.run_episodes(data, info.run_id)
    assert (runs.run_dir(again, other.run_id) / "curated_tasks.jsonl").read_bytes() == \
        (runs.run_dir(data, info.run_id) / "curated_tasks.jsonl").read_bytes()

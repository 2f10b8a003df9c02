"""Targeted worlds: a run's dominant causes become brief files whose mix, rule values and scale aim at them,
built through the same pipeline; the scripted weak policy's weakness then makes up most of the new world."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from worldfactory.briefs import MAX_MIX, load_brief_file
from worldfactory.cli import main
from worldfactory.confine import open_world
from worldfactory.evals import runs
from worldfactory.evals.target import (
    DISTRACTORS,
    MIN_MIX,
    SCALE_UP,
    TWINS,
    dominant,
    near_thresholds,
    propose,
    register,
    task_mix,
)
from worldfactory.rollouts import RolloutConfig
from worldfactory.spec import WorldSpec
from worldfactory.templates import TemplateError, load_templates
from worldfactory.variants import MIX_FAMILIES

WORLD = "commerce-operations.startup--v001"


@pytest.fixture()
def data(tmp_path: Path, worlds_dir: Path) -> Path:
    shutil.copytree(worlds_dir / WORLD, tmp_path / "worlds" / WORLD)
    return tmp_path


def play(data: Path, bundle: Path, policy: str, k: int, tasks: list[str] | None = None) -> runs.RunInfo:
    return runs.execute(data, [bundle], RolloutConfig(policy=policy, k=k), tasks, open_world)


def exercised(data: Path, rid: str) -> tuple[int, int]:
    """(tasks with at least one failed episode, tasks)."""
    per: dict[str, list[bool]] = {}
    for e in runs.run_episodes(data, rid):
        per.setdefault(e["task_id"], []).append(e["reward"] >= 1.0)
    return sum(not all(v) for v in per.values()), len(per)


def test_dominant_causes_and_the_mix() -> None:
    assert dominant({"gave_up": 10, "wrong_record": 4, "looped": 1}) == ["gave_up", "wrong_record"]
    assert dominant({"wrong_value": 1}) == ["wrong_value"]
    mix = task_mix({"decline": 0.5, "conditional": 0.25, "bulk": 0.0})
    assert mix["decline"] == 8.0 and mix["conditional"] == 4.0
    assert mix["bulk"] == mix["workflow"] == MIN_MIX  # never failed (or never played): cut to the least
    assert task_mix({"bulk": 0.0}) == {}


def test_rules_are_set_at_the_median_of_what_their_guards_compare(worlds_dir: Path) -> None:
    bundle = worlds_dir / WORLD
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_text())
    rules = near_thresholds(bundle)
    assert rules and set(rules) <= {r.name for r in spec.rules}
    assert any(rules[r] != spec.brief.rules[r] for r in rules)  # the world's own values were not near the middle
    con = sqlite3.connect(bundle / "seed.db")
    try:
        for table in spec.tables:
            for tr in table.workflow.transitions if table.workflow else []:
                for g in tr.guards:
                    if g.rule in rules and g.field.startswith("row."):
                        values = [v for (v,) in con.execute(
                            f'SELECT "{g.field[4:]}" FROM "{table.name}" WHERE "{table.workflow.column}" IN '
                            f'({",".join("?" * len(tr.from_))})', tr.from_)]
                        below = sum(v < rules[g.rule] for v in values) / len(values)
                        assert 0.3 <= below <= 0.6, (g.rule, below)  # about half on each side of the rule
                        break
    finally:
        con.close()


def test_a_rule_blind_run_targets_rules_and_the_built_world_concentrates_on_them(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = data / "worlds" / WORLD
    before = play(data, source, "rule_blind", 4)
    capsys.readouterr()
    assert main(["target", before.run_id, "--data", str(data), "--no-dagster", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["causes"][0] == "rule_ignored"
    [brief] = plan["briefs"]
    assert brief["source"] == WORLD and brief["knobs"] == ["task_mix", "thresholds"] and brief["scale"] is None
    mix = brief["task_mix"]
    assert mix["decline"] == 8.0 and mix["conditional"] > 1 and mix["lookup_act"] == MIN_MIX
    written = yaml.safe_load(Path(brief["path"]).read_text())
    assert written["task_mix"] == mix and written["rules"] == brief["rules"] and before.run_id in written["origin"]
    target = data / "worlds" / brief["world_id"]
    built = json.loads((target / "brief.json").read_text())
    assert built["task_mix"] == mix and all(built["rules"][r] == v for r, v in brief["rules"].items())
    assert built["domain"] == "commerce-operations" and built["company_type"] == "startup"
    # the same run proposes the same briefs, byte for byte, and registering them again changes nothing
    assert propose(data, before.run_id).model_dump() == plan
    assert register(propose(data, before.run_id), load_templates()) == [brief["world_id"]]

    a = play(data, source, "rule_blind", 8)
    b = play(data, target, "rule_blind", 8)
    (hit_a, n_a), (hit_b, n_b) = exercised(data, a.run_id), exercised(data, b.run_id)
    assert hit_a / n_a < 0.2 and hit_b / n_b > 0.5, (hit_a, n_a, hit_b, n_b)
    summary = json.loads((runs.run_dir(data, b.run_id) / "summary.json").read_text())
    assert summary["top_cause"] == "rule_ignored" and summary["band"][brief["world_id"]] > 0


@pytest.mark.parametrize(("policy", "knob"), [("first_write", "horizons"), ("name_confuser", "distractors")])
def test_other_weaknesses_turn_up_the_scale_and_their_families(data: Path, policy: str, knob: str) -> None:
    source = data / "worlds" / WORLD
    info = play(data, source, policy, 2)
    plan = propose(data, info.run_id)
    [brief] = plan.briefs
    assert knob in brief.knobs and "thresholds" not in brief.knobs and not brief.rules
    scale = json.loads((source / "brief.json").read_text())["scale"]
    if knob == "horizons":  # longer bulk tasks and workflows: a larger world
        assert brief.scale == round(scale * SCALE_UP, 3) and brief.distractors == 0
    else:  # look-alike names, the most near-duplicate pairs, and the family made of them at its largest
        assert brief.scale is None and brief.distractors == DISTRACTORS and brief.twins == TWINS
        assert brief.task_mix["discover"] == MAX_MIX
    failed: dict[str, int] = {}
    for e in runs.run_episodes(data, info.run_id):
        failed[e["family"]] = failed.get(e["family"], 0) + (e["reward"] < 1.0)
    most = max((f for f in failed if f in MIX_FAMILIES), key=lambda f: failed[f])  # ask, inbox: not in the mix
    assert brief.task_mix[most] > 1 and min(brief.task_mix.values()) == MIN_MIX
    ids = register(plan, load_templates())
    loaded = load_brief_file(Path(brief.path), load_templates())
    assert loaded.scale == brief.scale and loaded.task_mix == brief.task_mix and ids == [brief.world_id]
    assert loaded.distractors == brief.distractors and loaded.twins == brief.twins


def test_bad_brief_values_and_a_changed_brief_are_refused_with_file_and_field(data: Path) -> None:
    ts = load_templates()
    briefs = data / "briefs"
    briefs.mkdir()
    bad: list[tuple[dict[str, Any], str]] = [
        ({"task_mix": {"gossip": 2.0}}, "field 'task_mix.gossip': no such task family"),
        ({"task_mix": {"bulk": 50.0}}, "field 'task_mix.bulk'"),
        ({"scale": 40.0}, "scale"),
        ({"distractors": 1.5}, "distractors"),
        ({"twins": 4}, "twins"),
    ]
    for extra, message in bad:
        path = briefs / "bad.yaml"
        path.write_text(yaml.safe_dump({"domain": "commerce-operations", "company_type": "startup", **extra}))
        with pytest.raises(TemplateError, match=message) as err:
            load_brief_file(path, ts)
        assert str(path) in str(err.value)
    info = play(data, data / "worlds" / WORLD, "rule_blind", 1)
    plan = propose(data, info.run_id)
    Path(plan.briefs[0].path).write_text("domain: commerce-operations\ncompany_type: startup\n")
    with pytest.raises(TemplateError, match="exists with other content"):
        register(plan, ts)
    assert Path(plan.briefs[0].path).read_text() == "domain: commerce-operations\ncompany_type: startup\n"

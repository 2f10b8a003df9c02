"""Targeted worlds: a run's dominant causes become brief files whose mix, rule values and scale aim at them,
built through the same pipeline; the scripted weak policy's weakness then makes up most of the new world."""

from __future__ import annotations

import json
import random
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
    REFUSALS,
    RULE_PASS,
    SCALE_UP,
    TWINS,
    dominant,
    near_thresholds,
    passing,
    propose,
    register,
    task_mix,
)
from worldfactory.generate.tasks import conditional, handbook
from worldfactory.generate.tasks.builder import TaskBuilder
from worldfactory.generate.tasks.driver import run_family, take
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


def run_target(data: Path, run_id: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`worldfactory target RUN --json` without Dagster: the plan it prints (causes, briefs)."""
    capsys.readouterr()
    assert main(["target", run_id, "--data", str(data), "--no-dagster", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def exercised(data: Path, rid: str) -> tuple[int, int]:
    """(tasks with at least one failed episode, tasks)."""
    per: dict[str, list[bool]] = {}
    for e in runs.run_episodes(data, rid):
        per.setdefault(e["task_id"], []).append(e["reward"] >= 1.0)
    return sum(not all(v) for v in per.values()), len(per)


def decided(bundle: Path) -> tuple[int, int]:
    """(conditional and handbook tasks that take the alternative the rule sends them to, those that take the
    step the rule guards)."""
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_text())
    steps = {tr.name for t in spec.tables if t.workflow for tr in t.workflow.transitions
             if tr.otherwise and any(g.rule for g in tr.guards)}
    refused = allowed = 0
    for line in (bundle / "tasks.jsonl").read_text().splitlines():
        task = json.loads(line)
        if task["family"] in ("conditional", "handbook"):
            took = any(c["tool"] in steps for c in task["oracle"])
            refused, allowed = (refused, allowed + 1) if took else (refused + 1, allowed)
    return refused, allowed


def test_dominant_causes_and_the_mix() -> None:
    assert dominant({"gave_up": 10, "wrong_record": 4, "looped": 1}) == ["gave_up", "wrong_record"]
    assert dominant({"wrong_value": 1}) == ["wrong_value"]
    mix = task_mix({"decline": 0.5, "conditional": 0.25, "bulk": 0.0})
    assert mix["decline"] == 8.0 and mix["conditional"] == 4.0
    assert mix["bulk"] == mix["workflow"] == MIN_MIX  # never failed (or never played): cut to the least
    assert task_mix({"bulk": 0.0}) == {}


def test_weighted_pools_draw_that_many_per_round_and_even_ones_as_before() -> None:
    def pools() -> list[list[str]]:
        return [[f"a{i}" for i in range(20)], [f"b{i}" for i in range(20)]]

    even = take(random.Random(7), pools(), 12)
    assert take(random.Random(7), pools(), 12, [1, 1]) == even  # weight 1 everywhere: the same draw
    assert sum(x[0] == "b" for x in even) == 6
    weighted = take(random.Random(7), pools(), 12, [1, 3])
    assert sum(x[0] == "b" for x in weighted) == 9 and set(weighted) - set(even) <= {f"b{i}" for i in range(20)}


def test_rules_are_set_so_that_a_quarter_of_what_their_guards_compare_passes(worlds_dir: Path) -> None:
    bundle = worlds_dir / WORLD
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_text())
    rules = near_thresholds(bundle)
    assert rules and set(rules) <= {r.name for r in spec.rules}
    assert any(rules[r] != spec.brief.rules[r] for r in rules)  # the world's own values were not near the middle
    con = sqlite3.connect(bundle / "seed.db")
    checked = 0
    try:
        for table in spec.tables:
            for tr in table.workflow.transitions if table.workflow else []:
                for g in tr.guards:
                    if g.rule in rules and g.field.startswith("row."):
                        values = [v for (v,) in con.execute(
                            f'SELECT "{g.field[4:]}" FROM "{table.name}" WHERE "{table.workflow.column}" IN '
                            f'({",".join("?" * len(tr.from_))})', tr.from_)]
                        limit = rules[g.rule]
                        passed = sum(v <= limit if g.op in ("<", "<=") else v >= limit for v in values) / len(values)
                        assert 0.1 <= passed <= 0.45, (g.rule, passed)  # about RULE_PASS pass it, the rest do not
                        checked += 1
                        break
    finally:
        con.close()
    assert checked and abs(RULE_PASS - 0.25) < 1e-9
    assert passing([1, 2, 3, 4, 5, 6, 7, 8, 9], "<=") == 3 and passing([1, 2, 3, 4, 5, 6, 7, 8, 9], ">") == 7
    assert passing([1, 2, 3, 4, 5, 6, 7, 8, 9], "==") == 5


def test_a_rule_blind_run_targets_rules_and_the_built_world_concentrates_on_them(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = data / "worlds" / WORLD
    before = play(data, source, "rule_blind", 4)
    plan = run_target(data, before.run_id, capsys)
    assert plan["causes"][0] == "rule_ignored"
    [brief] = plan["briefs"]
    scale = json.loads((source / "brief.json").read_text())["scale"]
    assert brief["source"] == WORLD and brief["knobs"] == ["task_mix", "thresholds"]
    assert brief["scale"] == round(scale * SCALE_UP, 3)  # records enough for the rule-decided families
    mix = brief["task_mix"]
    assert mix["decline"] == 8.0 and mix["conditional"] > 1 and mix["lookup_act"] == MIN_MIX
    written = yaml.safe_load(Path(brief["path"]).read_text())
    assert written["task_mix"] == mix and written["rules"] == brief["rules"] and before.run_id in written["origin"]
    assert brief["refusals"] == written["refusals"] == REFUSALS and not brief["named"]
    target = data / "worlds" / brief["world_id"]
    built = json.loads((target / "brief.json").read_text())
    assert built["task_mix"] == mix and all(built["rules"][r] == v for r, v in brief["rules"].items())
    assert built["refusals"] == REFUSALS
    refused, allowed = decided(target)
    # mostly what the rule refuses, some of what it allows (a small world's pools run out: the rows decide)
    assert refused > allowed > 0, (refused, allowed)
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
    assert loaded.named == brief.named == (knob == "distractors") and loaded.refusals == brief.refusals == 1


def test_a_name_confuser_run_targets_names_and_the_built_world_concentrates_on_them(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = data / "worlds" / WORLD
    before = play(data, source, "name_confuser", 2)
    [brief] = run_target(data, before.run_id, capsys)["briefs"]
    assert brief["named"] and "distractors" in brief["knobs"]
    target = data / "worlds" / brief["world_id"]
    assert json.loads((target / "brief.json").read_text())["named"] is True
    spec = WorldSpec.model_validate_json((target / "spec.json").read_text())
    labels = {f"search_{t.name}": t.label for t in spec.tables if t.label}
    tasks = [json.loads(line) for line in (target / "tasks.jsonl").read_text().splitlines()]
    unnamed = [t["task_id"] for t in tasks if t["family"] in MIX_FAMILIES and not any(
        len(str(c["args"].get(labels.get(c["tool"], ""), "")).split()) > 1 for c in t["oracle"])]
    # only the tasks coverage adds for a write tool no family used may leave names out
    assert len(unnamed) < 0.1 * len(tasks), unnamed
    a = play(data, source, "name_confuser", 8)
    b = play(data, target, "name_confuser", 8)
    (hit_a, n_a), (hit_b, n_b) = exercised(data, a.run_id), exercised(data, b.run_id)
    assert hit_a / n_a < 0.35 and hit_b / n_b > 0.6, (hit_a, n_a, hit_b, n_b)
    summary = json.loads((runs.run_dir(data, b.run_id) / "summary.json").read_text())
    assert summary["top_cause"] == "wrong_record" and summary["band"][brief["world_id"]] > 0


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


@pytest.mark.parametrize("family", [conditional, handbook])
def test_refusals_weigh_the_draw_toward_what_the_rule_refuses(worlds_dir: Path, family: Any) -> None:
    bundle = worlds_dir / "litigation-firm.national--v001"
    spec = WorldSpec.model_validate_json((bundle / "spec.json").read_text())
    tools = {t["name"] for t in json.loads((bundle / "tools.json").read_text())}
    steps = {tr.name for t in spec.tables if t.workflow for tr in t.workflow.transitions
             if tr.otherwise and any(g.rule for g in tr.guards)}
    shares = {}
    for refusals in (1, REFUSALS):
        brief = spec.brief.model_copy(update={"refusals": refusals, "task_mix": {family.FAMILY: 4.0},
                                              "rules": {**spec.brief.rules, **near_thresholds(bundle)}})
        b = TaskBuilder(spec.model_copy(update={"brief": brief}), tools, (bundle / "seed.db").read_bytes())
        try:
            run_family(b, family)
        finally:
            b.close()
        took = [any(c.tool in steps for c in t.oracle) for t in b.tasks]
        shares[refusals] = 1 - sum(took) / len(took)
    # the share of tasks the rule refuses: weighted, most of them, and well above the even draw's
    assert shares[REFUSALS] > 0.75 and shares[REFUSALS] - shares[1] >= 0.15, shares

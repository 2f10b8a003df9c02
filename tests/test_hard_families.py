"""The hard tier's distractors and handbook (issue 33): twins seeded on purpose, the discover and handbook
families, the trap each task sets, difficulty features, and the scripted policies that show the gradient."""

from __future__ import annotations

import random

import pytest

from worldfactory.catalog import SCHEMAS
from worldfactory.generate import handbook
from worldfactory.generate.data import build_seed_db, open_image
from worldfactory.generate.handbook import TABLE, band, handbook_rules, in_band
from worldfactory.generate.schema import build_spec
from worldfactory.generate.twins import find_twins
from worldfactory.generate.validity import check_task
from worldfactory.generate.workflow import id_param
from worldfactory.policies.base import run_policy
from worldfactory.runtime.episode import Episode, Verdict
from worldfactory.runtime.world import World
from worldfactory.seeds import expand_seed
from worldfactory.spec import Task, ToolCall
from worldfactory.templates import load_templates
from worldfactory.variants import TWIN_LEVELS, variation

INSURANCE = "insurance-claims.regional--v001"


def _family(world: World, family: str) -> list[Task]:
    return [t for t in world.tasks.values() if t.family == family]


def _passes(world: World, task: Task, calls: list[ToolCall]) -> bool:
    with world.episode(task.task_id) as ep:
        for c in calls:
            ep.call(c.tool, c.args)
        return ep.verify(task.answer).passed


def test_twins_are_seeded_deterministically_and_follow_the_knob() -> None:
    """Three kinds of pairs, the same bytes twice; brief.twins=0 seeds none and 3 seeds more than 1."""
    templates = load_templates()
    brief = expand_seed(INSURANCE, templates)
    spec = build_spec(brief, templates)
    image = build_seed_db(spec, templates.vocabulary)
    assert image == build_seed_db(spec, templates.vocabulary)
    pairs = find_twins(spec, open_image(image))
    assert {p.kind for p in pairs} == {"dated", "named", "same_name"}
    counts = {}
    for level in (0, 1, 3):
        other = build_spec(brief.model_copy(update={"twins": level}), templates)
        counts[level] = len(find_twins(other, open_image(build_seed_db(other, templates.vocabulary))))
    assert counts[0] == 0 < counts[1] < counts[3]
    drawn = {variation(templates.domains["insurance-claims"], templates.company_types["regional"], templates, v,
                       v).twins for v in range(2, 22)}
    assert drawn <= set(TWIN_LEVELS) and len(drawn) > 1  # variants turn distractors up and down


def test_discover_oracle_passes_and_the_wrong_twin_fails(worlds: dict[str, World]) -> None:
    """Every discover task names one of a pair; its search lists both, and acting on the other one fails."""
    world = worlds[INSURANCE]
    tasks = _family(world, "discover")
    assert len(tasks) >= 8
    for task in tasks:
        assert task.trap and task.difficulty.distractors == 1
        assert _passes(world, task, task.oracle), task.task_id
        assert not _passes(world, task, task.trap), task.task_id
        search = next(c for c in task.oracle if c.tool.startswith("search_"))
        with world.episode(task.task_id) as ep:
            step = ep.call(search.tool, search.args)
        assert len((step.result or {}).get("results") or []) >= 1


def test_a_blind_verifier_lets_the_trap_through_and_validity_says_so(worlds: dict[str, World]) -> None:
    """The trap mutant: a verifier that passes everything passes the wrong twin, and the validity check names it."""
    world = worlds[INSURANCE]
    task = _family(world, "discover")[0]

    def blind(ep: Episode, answer: object) -> Verdict:
        return Verdict(passed=True, reward=1.0, mismatches=[])

    honest = check_task(world, task, random.Random(0))
    assert honest.valid and any(m.kind == "trap" and not m.passed for m in honest.mutants)
    report = check_task(world, task, random.Random(0), verify=blind)
    assert any(p.startswith("mutant passes but differs from gold: trap") for p in report.problems)


def test_the_handbook_states_rule_exception_and_escalation(worlds: dict[str, World]) -> None:
    """Every guarded step with an alternative gets a section with its band and reviewer; the tools read it."""
    world = worlds[INSURANCE]
    with world.episode() as ep:
        found = ep.call(f"search_{TABLE}", {"topic": "adjuster_approval_limit"}).result or {}
        rules = handbook_rules(world.spec, ep.conn)
    rows = found.get("results") or []
    assert len(rows) == 1 and "Exception (no tool enforces it)" in rows[0]["body"]
    assert "Escalation" in rows[0]["body"] and rows[0]["reviewer_id"] is not None
    assert {r.rule for r in rules} >= {"adjuster_approval_limit"}


def test_handbook_tasks_need_the_handbook_where_tools_allow_more(worlds: dict[str, World]) -> None:
    """A near-limit task: the step the tool allows succeeds as a call but fails the verifier; the oracle
    (alternative plus the reviewer's email) passes. The other cases have no trap."""
    world = worlds[INSURANCE]
    tasks = _family(world, "handbook")
    near = [t for t in tasks if t.trap]
    assert len(tasks) >= 6 and near and len(near) < len(tasks)
    for task in near:
        assert task.difficulty.rules == 3
        with world.episode(task.task_id) as ep:
            steps = [ep.call(c.tool, c.args) for c in task.trap]
            assert all(s.error is None for s in steps), task.task_id  # no tool refuses it
            assert not ep.verify(task.answer).passed
        assert _passes(world, task, task.oracle)
        assert any(c.tool == "create_email" for c in task.oracle)
    spec = world.spec
    with world.episode() as ep:
        hr = next(r for r in handbook_rules(spec, ep.conn) if r.rule == "adjuster_approval_limit")
    limit = world.brief.rules["adjuster_approval_limit"]
    assert in_band(hr, {"amount_claimed": limit}, {"approved_amount": limit * 0.95}, world.brief.rules)
    assert not in_band(hr, {"amount_claimed": limit}, {"approved_amount": limit * 0.5}, world.brief.rules)
    assert not in_band(hr, {"amount_claimed": limit * 2}, {"approved_amount": limit * 1.5}, world.brief.rules)


@pytest.mark.parametrize("wid", [INSURANCE, "litigation-firm.national--v001", "commerce-operations.startup--v001"])
def test_scripted_policies_show_the_gradient(worlds: dict[str, World], wid: str) -> None:
    """first_hit fails most discover tasks and passes the easy families; refusal_only fails exactly the
    handbook tasks whose trap is what the tools allow; the oracle passes all of both."""
    world = worlds[wid]
    discover, handbook = _family(world, "discover"), _family(world, "handbook")
    easy = _family(world, "lookup_act")

    def rate(tasks: list[Task], policy: str) -> float:
        return sum(run_policy(world, t.task_id, policy).verdict.passed for t in tasks) / len(tasks)

    assert discover and easy
    assert rate(discover, "oracle") == 1.0 and rate(handbook or easy, "oracle") == 1.0
    # which twin a task names is drawn (TWIN_SHARE, NOTED_TWIN_SHARE in tasks/discover.py), so the share is
    # the draw's: 4 of 10 in insurance before issue 33's inbox notes and near-limit seeding moved the draws, 6 after
    assert rate(discover, "first_hit") <= 0.6
    assert rate(easy, "first_hit") >= 0.9
    for task in handbook:
        passed = run_policy(world, task.task_id, "refusal_only").verdict.passed
        assert passed == (not task.trap), task.task_id
    assert sum(bool(t.trap) for t in handbook) >= 2, wid  # refusal_only fails some handbook tasks in every pack
    for task in _family(world, "ask")[:2]:  # ask_requester is the episode's tool, not the world's: no KeyError
        assert run_policy(world, task.task_id, "first_hit").steps, task.task_id


def _near(world_spec: object, image: bytes) -> dict[str, int]:
    """Records in each row-guarded rule's near-limit band, in the states its step starts from."""
    conn = open_image(image)
    out: dict[str, int] = {}
    for hr in handbook_rules(world_spec, conn):  # type: ignore[arg-type]
        kind, _, name = hr.guard.field.partition(".")
        limits = band(hr, world_spec.brief.rules[hr.rule])  # type: ignore[attr-defined]
        if kind != "row" or limits is None:
            continue
        states = [s for s in hr.step.from_ if s in hr.alternative.from_]
        assert hr.table.workflow is not None
        values = [v for (v,) in conn.execute(f"SELECT {name} FROM {hr.table.name} WHERE {hr.table.workflow.column} "
                                             f"IN ({', '.join('?' * len(states))})", states)]
        out[hr.rule] = sum(limits[0] <= float(v) <= limits[1] for v in values if v is not None)
    return out


def test_near_limit_records_are_seeded_where_the_draw_left_none(monkeypatch: pytest.MonkeyPatch,
                                                                worlds: dict[str, World]) -> None:
    """Commerce's requested returns drew fewer refunds within the band under its limit than its handbook tasks
    need: seeding moves records past the limit into it, so they have near-limit cases. Planted: with the
    seeding off (MIN_NEAR 0) the band holds fewer than MIN_NEAR records, and the check above fails on it."""
    wid = "commerce-operations.startup--v001"
    world = worlds[wid]
    assert _near(world.spec, world.seed_image) == {"auto_refund_limit": handbook.MIN_NEAR}
    for other in worlds.values():
        near = _near(other.spec, other.seed_image)  # a rule with few records past its limit keeps half of them
        assert not near or max(near.values()) >= handbook.MIN_NEAR, other.world_id
    wanted = handbook.MIN_NEAR
    monkeypatch.setattr(handbook, "MIN_NEAR", 0)
    planted = build_seed_db(world.spec, load_templates().vocabulary)
    assert _near(world.spec, planted)["auto_refund_limit"] < wanted


def test_difficulty_is_recorded_in_tasks_and_catalog(worlds: dict[str, World]) -> None:
    """Each task's features are counted from its plan and have catalog columns."""
    world = worlds[INSURANCE]
    for task in world.tasks.values():
        d = task.difficulty
        assert d.oracle_calls == len(task.oracle)
        assert d.distinct_tools == len({c.tool for c in task.oracle})
    assert any(t.difficulty.rules >= 2 for t in world.tasks.values())
    names = set(SCHEMAS["tasks"].names)
    assert {f"difficulty_{k}" for k in ("oracle_calls", "distinct_tools", "distractors", "rules", "facts_to_ask",
                                        "records_to_discover")} <= names


def test_reading_both_twins_is_a_valid_alternative(worlds: dict[str, World]) -> None:
    """Comparing the two candidates (reading the other twin too) before acting on the right one passes."""
    world = worlds[INSURANCE]
    for task in _family(world, "discover"):
        reads = [c for c in task.trap if c.tool.startswith("get_") and c not in task.oracle]
        if reads:
            act = len(task.oracle) - 1
            assert _passes(world, task, task.oracle[:act] + reads + task.oracle[act:]), task.task_id


def test_the_handbook_is_also_an_mcp_resource(worlds: dict[str, World]) -> None:
    """Listed and read over the in-process SDK server and over served HTTP, with every section the handbook
    tools return; read from the episode's own database (a changed section shows); an unknown uri is an error."""
    import anyio
    from mcp import Client

    from tests.test_serving import Server
    from worldfactory.runtime.mcp_server import HANDBOOK_URI, build_server

    world = worlds[INSURANCE]
    with world.episode() as ep:
        bodies = [r["body"] for r in (ep.call(f"search_{TABLE}", {"limit": 100}).result or {})["results"]]
    assert len(bodies) >= 2

    async def read(target: object) -> tuple[list[str], str, bool]:
        async with Client(target) as client:  # type: ignore[arg-type]
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            text = (await client.read_resource(HANDBOOK_URI)).contents[0].text  # type: ignore[union-attr]
            try:
                await client.read_resource("worldfactory://nothing")
                refused = False
            except Exception:
                refused = True
            return listed, text, refused

    episode = world.episode()
    episode.conn.execute(f"UPDATE {TABLE} SET body = 'planted section' WHERE id = 1")
    for target in (build_server(world), None, build_server(world, episode)):
        if target is None:
            with Server(world) as server:
                listed, text, refused = anyio.run(read, server.url + "/mcp")
        else:
            listed, text, refused = anyio.run(read, target)
        assert listed == [HANDBOOK_URI] and refused
        if target is not None and getattr(target, "_episode", None) is episode:
            assert "planted section" in text and bodies[0] not in text
        else:
            assert all(body in text for body in bodies)


def _band_tasks(world_spec: object, image: bytes, tasks: list[Task]) -> list[str]:
    """Tasks outside the handbook family whose oracle takes a handbook step on a seed record in its band:
    the instruction says "do it" (or states the rule alone) where the handbook says not to."""
    conn = open_image(image)
    steps = {hr.step.name: hr for hr in handbook_rules(world_spec, conn)}  # type: ignore[arg-type]
    out = []
    for task in tasks:
        for call in task.oracle if task.family != "handbook" else []:
            hr = steps.get(call.tool)
            key = id_param(hr.table) if hr is not None else ""
            rows = conn.execute(f"SELECT * FROM {hr.table.name} WHERE id = ?", (call.args.get(key),)) \
                if hr is not None else None
            cols = [d[0] for d in rows.description] if rows is not None else []
            row = rows.fetchone() if rows is not None else None
            if hr is not None and row is not None and in_band(hr, dict(zip(cols, row, strict=True)), call.args,
                                                              world_spec.brief.rules):  # type: ignore[attr-defined]
                out.append(task.task_id)
                break
    return out


def test_no_instruction_contradicts_the_handbooks_near_limit_exception(monkeypatch: pytest.MonkeyPatch,
                                                                       worlds: dict[str, World]) -> None:
    """Found solving blind: "if its blocked rooms are within our maximum group block, mark it definite;
    otherwise send it to the director" on a block of 35 rooms against a limit of 37, where the handbook says
    34 to 37 counts as near the limit (send it to the director and email the reviewer). A conditional,
    lookup or inbox task never takes a handbook step on a record in its band. Planted: with the check off,
    commerce's tasks take the refund approval on near-limit returns again."""
    from worldfactory.generate.tasks import generate_tasks
    from worldfactory.generate.tasks.builder import TaskBuilder

    for world in worlds.values():
        assert _band_tasks(world.spec, world.seed_image, list(world.tasks.values())) == [], world.world_id
        assert _family(world, "conditional"), world.world_id
    world = worlds["commerce-operations.startup--v001"]
    tools = set(world.tools_by_name)
    assert _band_tasks(world.spec, world.seed_image, generate_tasks(world.spec, tools, world.seed_image)) == []
    monkeypatch.setattr(TaskBuilder, "in_handbook_band", lambda self, tr, row, args: False)
    monkeypatch.setattr(TaskBuilder, "handbook_forbids", lambda self, oracle: False)
    planted = _band_tasks(world.spec, world.seed_image, generate_tasks(world.spec, tools, world.seed_image))
    assert any(t.startswith("conditional-") for t in planted), planted


def test_a_whole_number_fields_band_has_whole_bounds() -> None:
    """Hotel's group block limit (37 rooms): the band is 34 to 37 rooms, not 33.3 to 37 (rounded inward);
    a money field keeps its cents."""
    templates = load_templates()
    spec = build_spec(expand_seed("hotel-operations.regional--v001", templates), templates)  # type: ignore[arg-type]
    conn = open_image(build_seed_db(spec, templates.vocabulary))
    rules = {hr.rule: hr for hr in handbook_rules(spec, conn)}
    block = next(hr for hr in rules.values() if hr.table.name == "group_blocks")
    assert band(block, 37) == (34.0, 37.0)
    assert band(block, 37.5) == (34.0, 37.0)
    money = next(hr for hr in rules.values() if hr.table.column(hr.guard.field.partition(".")[2]).type == "money")
    assert band(money, 1234.0) in ((1110.6, 1234.0), (1234.0, 1357.4))
    rows = handbook.sections(spec, conn)
    assert any("from 34 to 37 inclusive" in r["body"] for r in rows if r["topic"] == block.rule)


def test_a_look_alike_company_name_never_repeats_its_last_word() -> None:
    """Found over the 100 seed types: "Harbor Holdings Holdings" beside "Harbor Holdings". With twins
    as drawn, no account of the world where it was found names the same word twice in a row."""
    templates = load_templates()
    brief = expand_seed("manufacturing-quality.family-owned--v001", templates)
    spec = build_spec(brief, templates)
    names = [n for (n,) in open_image(build_seed_db(spec, templates.vocabulary)).execute("SELECT name FROM accounts")]
    assert len(names) > 10
    assert [n for n in names if any(a == b for a, b in zip(n.split(), n.split()[1:], strict=False))] == []

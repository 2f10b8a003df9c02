"""A free-text brief becomes a world through a model played by a loopback server (tests/llm_server.py).

The "model" answers with real packs: tests/small_templates' help-desk pack as JSON, renamed, or
broken on purpose. Drafting is its own step above the build (worldfactory.drafting.step, `worldfactory
draft`, the pack_draft asset): it records the pack in data/drafts/ with its cost and corrections, and
world_brief only reads that record. Every build is the real engine (and once real Dagster) on the small
template set.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import small_templates_at
from tests.llm_server import LLMServer, ScriptedReplies
from worldfactory.briefs import brief_world_ids
from worldfactory.cli import main as cli_main
from worldfactory.drafting.checks import check_drafted
from worldfactory.drafting.client import ModelUnavailable
from worldfactory.drafting.config import PRICES
from worldfactory.drafting.errors import DraftError
from worldfactory.drafting.loop import validate_reply
from worldfactory.drafting.prompt import EXAMPLE
from worldfactory.drafting.step import DraftResult, draft_brief
from worldfactory.drafts import RECORD, DraftRecord, draft_folder
from worldfactory.packs import check_domain, pack_schema
from worldfactory.stages.core import StageError
from worldfactory.stages.pipeline import BuildResult, build_world
from worldfactory.templates import TemplateSet, load_templates
from worldfactory_dagster.pipelines.definitions import make_definitions
from worldfactory_dagster.resources.world_store import WorldStore

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

SLUG = "acme-desk"
WID = f"brief.{SLUG}--v001"
MODEL = "gpt-4o-mini"  # in the price table, so dollars are not zero
BRIEF = "---\ncompany_name: Acme Desk\ncompany_type: small\n---\nWe run the IT service desk of a mid-sized firm.\n"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_templates_at(tmp_path_factory.mktemp("drafting") / "templates")


@pytest.fixture(scope="module")
def ts(templates: Path) -> TemplateSet:
    return load_templates(templates)


@pytest.fixture(scope="module")
def pack(templates: Path) -> dict[str, Any]:
    """A valid pack, as a model would send it: the help-desk pack as JSON, under a new name."""
    data = yaml.safe_load((templates / "domains" / "help-desk.yaml").read_text())
    data["name"] = "service-desk"
    return data


def data_root(base: Path, text: str = BRIEF) -> Path:
    (base / "briefs").mkdir(parents=True)
    (base / "briefs" / f"{SLUG}.md").write_text(text)
    return base


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "WORLDFACTORY_LLM_OFFLINE", "WORLDFACTORY_LLM_CACHE",
                 "WORLDFACTORY_LLM_PRICES", "WORLDFACTORY_LLM_MAX_REPAIRS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLDFACTORY_LLM_MODEL", MODEL)
    return monkeypatch


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def cost_rows(root: Path) -> dict[str, dict[str, Any]]:
    rows = pq.read_table(root / "catalog" / "costs" / f"world_id={WID}" / "part-0.parquet").to_pylist()
    return {r["stage"]: r for r in rows}


def dollars(prompt: int, completion: int) -> float:
    p = PRICES[MODEL]
    return round((prompt * p.input_per_mtok + completion * p.output_per_mtok) / 1e6, 8)


def brief_file(root: Path) -> Path:
    return root / "briefs" / f"{SLUG}.md"


def draft_and_build(root: Path, ts: TemplateSet) -> tuple[DraftResult, BuildResult]:
    """The draft step, then the build (which only reads the recorded draft)."""
    result = draft_brief(brief_file(root), ts)
    return result, build_world(WID, root, ts)


def recorded(root: Path) -> DraftRecord:
    return DraftRecord.model_validate_json((draft_folder(brief_file(root), MODEL) / RECORD).read_bytes())


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory, templates: Path, pack: dict[str, Any]) -> Iterator[dict]:
    """The valid-first-reply world, built through Dagster on a real instance (the server is gone afterwards).

    The server answers the first request with HTTP 429 (rate limited): the client retries it."""
    base = tmp_path_factory.mktemp("first")
    root = data_root(base / "data")
    model = ScriptedReplies([429, pack])
    saved = dict(os.environ)
    os.environ.pop("WORLDFACTORY_LLM_OFFLINE", None)
    os.environ["WORLDFACTORY_LLM_MODEL"] = MODEL
    try:
        with LLMServer(model) as url, dg.instance_for_test() as instance:
            os.environ["OPENAI_BASE_URL"] = url
            defs = make_definitions(WorldStore(root=str(root), templates_root=str(templates)))
            instance.add_dynamic_partitions("world", [WID])
            result = defs.resolve_job_def("brief_build").execute_in_process(
                instance=instance, partition_key=WID, raise_on_error=False,
                run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
            mats = {m.asset_key.path[-1]: {k: v.value for k, v in m.metadata.items()}
                    for m in result.get_asset_materialization_events()
                    for m in [m.event_specific_data.materialization]}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield {"root": root, "model": model, "result": result, "meta": mats, "base": base}


def test_a_valid_first_reply_builds_the_world_with_no_corrections(first: dict) -> None:
    assert first["result"].success
    model, root = first["model"], first["root"]
    [_, body] = model.bodies  # after the 429
    # the protocol: the whole pack as one JSON object through response_format json_schema
    assert body["model"] == MODEL and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "domain_pack", "schema": pack_schema("domain")}}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "IT service desk of a mid-sized firm" in body["messages"][1]["content"]
    bundle = root / "worlds" / WID
    manifest = json.loads((bundle / "world.json").read_text())
    usd = dollars(model.prompt_tokens, model.completion_tokens)
    assert usd > 0
    assert manifest["drafting"]["corrections"] == {} and manifest["drafting"]["attempts"] == 1
    # the draft step's cost is its own entry; world_brief spent nothing (it only read the recorded draft)
    assert manifest["costs"]["pack_draft"] == {"corrections": 0, "cost_usd": usd,
                                               "llm_prompt_tokens": model.prompt_tokens,
                                               "llm_completion_tokens": model.completion_tokens}
    assert manifest["costs"]["world_brief"] == {"corrections": 0, "cost_usd": 0.0, "llm_prompt_tokens": 0,
                                                "llm_completion_tokens": 0}
    assert json.loads((bundle / "pack.json").read_text())["name"] == "service-desk"
    brief = json.loads((bundle / "brief.json").read_text())
    assert (brief["domain"], brief["company_name"], brief["company_type"]) == ("service-desk", "Acme Desk", "small")
    # the draft is recorded in data/drafts/<key>/, keyed by the brief's bytes and the model, with its cost
    folder = draft_folder(brief_file(root), MODEL)
    assert folder.parent == root / "drafts"
    assert (folder / "pack.json").read_bytes() == (bundle / "pack.json").read_bytes()
    assert (folder / "brief.md").read_bytes() == brief_file(root).read_bytes()
    record = recorded(root)
    assert (record.prompt_tokens, record.completion_tokens, record.cost_usd) == (
        model.prompt_tokens, model.completion_tokens, usd)
    # Dagster: pack_draft sits upstream of world_brief, with what it cost and what this run paid
    meta = first["meta"]["pack_draft"]
    assert (meta["llm_prompt_tokens"], meta["llm_completion_tokens"], meta["corrections"], meta["reused"]) == (
        model.prompt_tokens, model.completion_tokens, 0, False)
    assert meta["cost_usd"] == pytest.approx(usd) and meta["spent_usd"] == pytest.approx(usd)
    assert meta["model_requests"] == 1
    assert first["meta"]["world_brief"]["llm_prompt_tokens"] == 0
    order = [m.asset_key.path[-1] for m in first["result"].get_asset_materialization_events()]
    assert order[:2] == ["pack_draft", "world_brief"]
    row = cost_rows(root)["world_brief"]
    assert (row["llm_prompt_tokens"], row["llm_completion_tokens"], row["corrections"]) == (0, 0, 0)
    assert sum(r["corrections"] for r in cost_rows(root).values()) == 0


def test_cached_rebuild_with_the_server_stopped_gives_the_same_bytes_at_no_cost(
        first: dict, templates: Path, ts: TemplateSet, model_env: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = first["root"]
    before = hashes(root / "worlds" / WID)
    model_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    model_env.setenv("WORLDFACTORY_TEMPLATES", str(templates))
    model_env.setenv("WORLDFACTORY_LLM_MODEL", "")  # --model names it; restored after the test, as is --offline's
    model_env.setenv("WORLDFACTORY_LLM_OFFLINE", "")
    code = cli_main(["build", WID, "--no-dagster", "--force", "--offline", "--model", MODEL, "--json",
                     "--data", str(root)])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert json.loads(out.out)[0]["skipped"] is False
    after = hashes(root / "worlds" / WID)
    assert after == before, [n for n in before if before[n] != after.get(n)]  # (an engine edited meanwhile shows
    #                                                                           as world.json and index.html only)
    assert first["model"].requests == 2  # the 429 and the reply, both while the world was first built
    row = cost_rows(root)["world_brief"]  # this build spent nothing
    assert (row["llm_prompt_tokens"], row["llm_completion_tokens"], row["cost_usd"]) == (0, 0, 0.0)
    # a changed brief text is another draft: the build alone refuses it, and the draft step --offline cannot ask
    brief = brief_file(root)
    original = brief.read_text()
    brief.write_text(original.replace("mid-sized", "large"))
    try:
        with pytest.raises(StageError, match="no draft of acme-desk.md by gpt-4o-mini is recorded .*: run the "
                                             "draft step first, `worldfactory draft brief.acme-desk--v001`"):
            build_world(WID, root, load_templates(templates))
        with pytest.raises(DraftError, match="not in the reply cache .* --offline forbids calling a model"):
            draft_brief(brief, ts)
    finally:
        brief.write_text(original)
    assert hashes(root / "worlds" / WID) == before


def test_the_stage_alone_never_calls_the_model_and_a_missing_draft_says_what_to_run(
        tmp_path: Path, ts: TemplateSet, pack: dict[str, Any], model_env: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], templates: Path) -> None:
    """The server is up and would answer with a valid pack; world_brief still asks it nothing."""
    root = data_root(tmp_path)
    model = ScriptedReplies([pack])
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        with pytest.raises(StageError) as err:
            build_world(WID, root, ts)
        assert model.requests == 0
        assert str(err.value) == (
            f"{WID}: no draft of acme-desk.md by {MODEL} is recorded ({draft_folder(brief_file(root), MODEL)}): run "
            f"the draft step first, `worldfactory draft {WID}` (or `worldfactory build {WID}`, which drafts first "
            f"when needed)")
        assert not (root / "worlds").exists()
        # the draft step alone asks once and records it; the build then reads it, asking nothing
        model_env.setenv("WORLDFACTORY_TEMPLATES", str(templates))
        assert cli_main(["draft", WID, "--json", "--data", str(root)]) == 0
        summary = json.loads(capsys.readouterr().out)[0]
        assert model.requests == 1 and summary["proven"] and not summary["reused"]
        assert summary["spent"]["model_requests"] == 1 and summary["cost_usd"] > 0
        build_world(WID, root, ts, force=True)
        assert model.requests == 1
        # no model named: the stage says how to draft, and asks nothing
        model_env.setenv("WORLDFACTORY_LLM_MODEL", "")
        with pytest.raises(StageError, match="no model is named .* `worldfactory draft brief.acme-desk--v001 "
                                             "--model M --base-url URL`"):
            build_world(WID, root, ts, force=True)
    assert model.requests == 1


def test_a_second_build_reuses_the_draft_without_calls(tmp_path: Path, templates: Path, pack: dict[str, Any],
                                                       model_env: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`worldfactory build` of a text brief runs the draft step first when no draft is recorded, and only then."""
    root = data_root(tmp_path)
    model = ScriptedReplies([pack])
    model_env.setenv("WORLDFACTORY_TEMPLATES", str(templates))
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        assert cli_main(["build", WID, "--no-dagster", "--json", "--data", str(root)]) == 0
        assert model.requests == 1
        assert "draft of acme-desk.md by gpt-4o-mini: proven, 1 replies" in capsys.readouterr().err
        first_bytes = hashes(root / "worlds" / WID)
        assert cli_main(["build", WID, "--no-dagster", "--force", "--json", "--data", str(root)]) == 0
        assert model.requests == 1  # the recorded draft, reused: no call
        assert "draft of" not in capsys.readouterr().err  # and no draft step at all
        assert hashes(root / "worlds" / WID) == first_bytes
        assert cli_main(["draft", SLUG, "--json", "--data", str(root)]) == 0  # named by slug: reused
        assert json.loads(capsys.readouterr().out)[0]["reused"] is True
        assert cli_main(["draft", str(brief_file(root)), "--force", "--json", "--data", str(root)]) == 0
        again = json.loads(capsys.readouterr().out)[0]  # drafted again from the reply cache: $0 now
        assert (again["reused"], again["spent"]["cost_usd"], again["spent"]["cached_replies"]) == (False, 0.0, 1)
        assert again["cost_usd"] == recorded(root).cost_usd > 0  # the conversation's cost, as when it was made
    assert model.requests == 1
    (root / "briefs" / "plain.yaml").write_text("domain: help-desk\ncompany_type: small\n")
    assert cli_main(["draft", "brief.plain--v001", "--data", str(root)]) == 2
    assert "names no free-text brief" in capsys.readouterr().err


def test_a_changed_model_or_draft_makes_the_world_stale(first: dict, ts: TemplateSet,
                                                       model_env: pytest.MonkeyPatch) -> None:
    from worldfactory.fingerprints import world_inputs_fingerprint

    briefs = first["root"] / "briefs"
    one = world_inputs_fingerprint(ts, WID, briefs)
    model_env.setenv("WORLDFACTORY_LLM_MODEL", "another-model")
    assert world_inputs_fingerprint(ts, WID, briefs) != one
    model_env.setenv("WORLDFACTORY_LLM_MODEL", MODEL)
    assert world_inputs_fingerprint(ts, WID, briefs) == one
    record = draft_folder(brief_file(first["root"]), MODEL) / RECORD  # the recorded pack is an input too
    saved = record.read_bytes()
    try:
        record.write_bytes(saved.replace(b'"pack_sha256": "', b'"pack_sha256": "0'))
        assert world_inputs_fingerprint(ts, WID, briefs) != one
    finally:
        record.write_bytes(saved)


def test_a_broken_draft_is_repaired_once(tmp_path: Path, ts: TemplateSet, pack: dict[str, Any],
                                         model_env: pytest.MonkeyPatch) -> None:
    broken = copy.deepcopy(pack)
    broken["tables"][0]["workflow"]["transitions"][0]["from"] = ["pending"]
    root = data_root(tmp_path)
    model = ScriptedReplies([broken, pack])
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        draft_and_build(root, ts)
    assert model.requests == 2
    second = model.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert json.loads(second[2]["content"]) == broken  # the same conversation, its reply included
    quote = second[3]["content"]
    assert "pack.json: field 'tables[0:requests].workflow.transitions[0:grant_credit].from[0]'" in quote
    assert "'pending'" in quote and "whole corrected domain pack as one JSON object" in quote
    manifest = json.loads((root / "worlds" / WID / "world.json").read_text())
    assert manifest["drafting"]["corrections"] == {"world_brief": 1} and manifest["drafting"]["attempts"] == 2
    assert manifest["costs"]["world_brief"]["corrections"] == 1
    assert manifest["costs"]["pack_draft"]["llm_prompt_tokens"] == model.prompt_tokens
    assert manifest["costs"]["pack_draft"]["corrections"] == 1
    assert cost_rows(root)["world_brief"]["corrections"] == 1
    record = recorded(root)  # the draft step's record: its cost and its corrections
    assert record.corrections == {"world_brief": 1} and len(record.attempts) == 2
    assert (record.prompt_tokens, record.cost_usd) == (model.prompt_tokens,
                                                      dollars(model.prompt_tokens, model.completion_tokens))
    assert record.attempts[0].failure is not None and record.attempts[0].failure.check == "pack_valid"


def test_a_model_that_never_gets_it_right_fails_clearly_publishes_nothing_and_its_cost_is_recorded(
        tmp_path: Path, ts: TemplateSet, pack: dict[str, Any], model_env: pytest.MonkeyPatch) -> None:
    failing_seed = copy.deepcopy(pack)  # valid, but the generated data breaks its own invariant
    failing_seed["invariants"] = [{"name": "no request has a fee", "sql": "SELECT count(*) FROM requests"}]
    no_anchor = {k: v for k, v in pack.items() if k != "anchor"}
    root = data_root(tmp_path)
    model = ScriptedReplies([failing_seed, "Sure! Here is the pack you asked for.", no_anchor])
    model_env.setenv("WORLDFACTORY_LLM_MAX_REPAIRS", "2")
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        result = draft_brief(brief_file(root), ts)
        assert not result.proven
        with pytest.raises(StageError) as err:
            build_world(WID, root, ts)
    assert model.requests == 3
    message = str(err.value)
    assert f"{WID}: the draft of acme-desk.md by {MODEL} did not prove:" in message
    assert "no draft proved after 3 replies (2 repairs)" in message and "field 'anchor': Field required" in message
    assert "run `worldfactory draft brief.acme-desk--v001 --force`" in message
    quoted = model.bodies[1]["messages"][-1]["content"]
    assert "Stage seed_database failed its check 'seed_integrity'" in quoted
    assert "invariant 'no request has a fee' (domains/" in quoted  # the drafted pack's own field:
    assert "field 'invariants[0:no request has a fee].sql') fails for" in quoted
    assert "not one JSON object" in model.bodies[2]["messages"][-1]["content"]
    assert not (root / "worlds").exists() or not any((root / "worlds").iterdir())
    record = recorded(root)  # what it spent is still recorded, with no pack
    assert (record.prompt_tokens, record.completion_tokens) == (model.prompt_tokens, model.completion_tokens)
    assert record.cost_usd == pytest.approx(dollars(model.prompt_tokens, model.completion_tokens)) and record.cost_usd
    assert record.corrections == {"seed_database": 1, "world_brief": 1} and record.error == result.draft.record.error
    assert not (draft_folder(brief_file(root), MODEL) / "pack.json").exists()


def test_429_then_success(first: dict) -> None:
    model = first["model"]
    assert model.requests == 2 and model.bodies[0] == model.bodies[1]  # the rate-limited request, sent again
    manifest = json.loads((first["root"] / "worlds" / WID / "world.json").read_text())
    assert manifest["drafting"]["attempts"] == 1 and len(manifest["drafting"]["requests"]) == 1


def test_a_server_that_keeps_failing_fails_the_build_and_records_no_pack(
        tmp_path: Path, ts: TemplateSet, model_env: pytest.MonkeyPatch) -> None:
    root = data_root(tmp_path)
    model = ScriptedReplies([503] * 10)
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        with pytest.raises(ModelUnavailable, match="InternalServerError.*after 4 retries") as err:
            draft_brief(brief_file(root), ts)
    assert isinstance(err.value, DraftError) and not isinstance(err.value, StageError)  # drafting's own error
    assert model.requests == 5, str(err.value)  # the first try and the client's 4 retries, with backoff
    assert not (root / "worlds").exists()
    assert not (draft_folder(brief_file(root), MODEL) / RECORD).exists()  # no draft recorded: nothing was decided


SMUGGLED = ("__import__('os').system('touch {canary}')", "\"\"\"); import os; os.system('touch {canary}'); (\"\"\"",
            "</script><script>alert(1)</script>", "{n.__class__.__mro__}", "'; DROP TABLE users; --")


def test_smuggled_code_like_strings_stay_inert(first: dict, tmp_path: Path, ts: TemplateSet,
                                               pack: dict[str, Any], model_env: pytest.MonkeyPatch) -> None:
    canary = tmp_path / "canary"
    payloads = [s.replace("{canary}", str(canary)) for s in SMUGGLED]
    # the first reply smuggles code where code could run: a table name, SQL that writes a file, a format field
    bad = copy.deepcopy(pack)
    bad["derive"] = [f"ATTACH DATABASE '{canary}' AS smuggled"]
    bad["tables"][0]["workflow"]["transitions"][2]["verb"] = "close {obj:>99999999}"
    # the second puts it where strings are data: titles, descriptions, labels, messages, departments
    sly = copy.deepcopy(pack)
    sly["title"] = payloads[0]
    sly["departments"] = [*payloads, *sly["departments"]]
    t = sly["tables"][0]
    t["description"] = payloads[1]
    t["columns"][3]["label"] = payloads[2]
    for tr in t["workflow"]["transitions"]:
        tr["description"] = payloads[1] + " " + payloads[3]
    t["workflow"]["transitions"][0]["guards"][0]["message"] = payloads[4]
    t["workflow"]["transitions"][0]["guards"][0]["says"] = payloads[2]
    root = data_root(tmp_path / "data")
    model = ScriptedReplies([bad, sly])
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        draft_and_build(root, ts)
    quote = model.bodies[1]["messages"][-1]["content"]
    assert "field 'tables[0:requests].workflow.transitions[2:close_request].verb': placeholder {obj:>99999999}" \
        in quote, quote
    assert "field 'derive[0]': not allowed in pack SQL" in quote
    assert not canary.exists()
    bundle = root / "worlds" / WID
    tools = (bundle / "tools.py").read_text()
    said = payloads[1] + " " + payloads[3]  # the transition descriptions: data in the manifest and the docstrings
    manifest = {t["name"]: t for t in json.loads((bundle / "tools.json").read_text())}
    assert manifest["resolve_request"]["description"].startswith(said)
    docs = {n.name: ast.get_docstring(n) for n in ast.walk(ast.parse(tools)) if isinstance(n, ast.FunctionDef)}
    assert docs["resolve_request"].startswith(said)

    def shape(source: str) -> str:
        """The code with every string constant blanked: what strings cannot change."""
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                node.value = ""
        return ast.dump(tree)

    clean = (first["root"] / "worlds" / WID / "tools.py").read_text()
    assert shape(tools) == shape(clean)  # the payloads changed string constants and nothing else
    page = (bundle / "index.html").read_text()
    assert payloads[2] not in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    lookup = copy.deepcopy(pack)  # a format field that walks attributes is refused by the pack language itself
    lookup["tables"][0]["columns"][0]["gen"] = {"code": "REQ-{n.__class__.__init__.__globals__}"}
    refused = validate_reply(json.dumps(lookup), load_brief(root, ts), ts)
    assert "field 'tables[0:requests].columns[0:reference].gen': code must hold only {n} or {n:0Wd}" in refused.reason  # type: ignore[union-attr]


def load_brief(root: Path, ts: TemplateSet) -> Any:
    from worldfactory.briefs import load_text_brief

    return load_text_brief(root / "briefs" / f"{SLUG}.md", ts)


@pytest.mark.parametrize("field,sql", [
    ("derive", "ATTACH DATABASE '/tmp/x.db' AS x"),
    ("derive", "VACUUM INTO '/tmp/x.db'"),
    ("derive", "PRAGMA writable_schema = 1"),
    ("derive", "DROP TABLE users"),
    ("invariants", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"),
    ("invariants", "DELETE FROM requests"),
    ("invariants", "SELECT load_extension('x')"),
])
def test_drafted_sql_may_only_read_or_change_rows(field: str, sql: str, pack: dict[str, Any],
                                                  ts: TemplateSet) -> None:
    data = copy.deepcopy(pack)
    data[field] = [sql] if field == "derive" else [{"name": "smuggled", "sql": sql}]
    out = validate_reply(json.dumps(data), brief_of(ts), ts)
    loc = "derive[0]" if field == "derive" else "invariants[0].sql"
    assert f"pack.json: field '{loc}': not allowed in pack SQL" in out.reason  # type: ignore[union-attr]
    fine = copy.deepcopy(pack)
    fine["derive"] = ["UPDATE requests SET credit = 0 WHERE status = 'open'"]
    assert not hasattr(validate_reply(json.dumps(fine), brief_of(ts), ts), "reason")


def brief_of(ts: TemplateSet) -> Any:
    from worldfactory.briefs import TextBrief

    return TextBrief(company_type="small", description="x")


def test_the_prompts_example_pack_is_a_valid_drafted_pack() -> None:
    real = load_templates()
    from worldfactory.spec import DomainPack

    pack = DomainPack.model_validate(EXAMPLE)
    assert check_domain(Path("pack.json"), pack, real.modules) == []
    reachable = {t.name: t for m in pack.modules for t in real.modules[m].tables} | {t.name: t for t in pack.tables}
    rules = {r.name for m in pack.modules for r in real.modules[m].rules}
    assert check_drafted(pack, EXAMPLE, reachable, set(real.domains), {}, rules) == []


def test_brief_new_writes_a_text_brief_the_sensor_registers(tmp_path: Path, templates: Path, ts: TemplateSet,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WORLDFACTORY_TEMPLATES", str(templates))
    assert cli_main(["brief", "new", "harbor", "--text", "A marina renting boat slips.", "--company-type", "small",
                     "--variants", "2", "--data", str(tmp_path)]) == 0
    text = (tmp_path / "briefs" / "harbor.md").read_text()
    assert text == "---\ncompany_type: small\nvariants: 2\n---\nA marina renting boat slips.\n"
    assert cli_main(["brief", "new", "harbor", "--text", "again", "--data", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert brief_world_ids(tmp_path / "briefs", ts) == (["brief.harbor--v001", "brief.harbor--v002"], [])
    (tmp_path / "briefs" / "bad.md").write_text("---\ncolour: blue\n---\nA bakery.\n")
    (tmp_path / "briefs" / "harbor.yaml").write_text("domain: help-desk\ncompany_type: small\n")
    ids, errors = brief_world_ids(tmp_path / "briefs", ts)
    assert ids == [] and len(errors) == 2
    assert any("bad.md: field 'colour': Extra inputs are not permitted" in e for e in errors)
    assert any("harbor.yaml" in e and "one brief file per slug" in e for e in errors)


def test_malformed_replies_get_a_repair_message_not_a_crash(tmp_path: Path, ts: TemplateSet, pack: dict[str, Any],
                                                            model_env: pytest.MonkeyPatch) -> None:
    """Deep nesting, a lone surrogate escaped in the pack's JSON, and a raw lone surrogate in the reply
    itself: each is refused with a message the model can act on; the fourth reply builds the world."""
    deep = "[" * 100_000 + "]" * 100_000
    escaped = json.dumps({**pack, "title": "Desk"}).replace('"Desk"', '"Desk \\ud800"')
    raw = json.dumps({**pack, "title": "Desk"}).replace('"Desk"', '"Desk \ud800"')
    root = data_root(tmp_path)
    model = ScriptedReplies([deep, escaped, raw, pack])
    with LLMServer(model) as url:
        model_env.setenv("OPENAI_BASE_URL", url)
        draft_and_build(root, ts)
    assert model.requests == 4
    quotes = [model.bodies[i]["messages"][-1]["content"] for i in (1, 2, 3)]
    assert "pack.json: the reply nests lists or objects too deeply to read" in quotes[0]
    assert "pack.json: field 'title': a lone surrogate ('\\ud800') is not text" in quotes[1], quotes[1]
    assert "pack.json: field 'title': a lone surrogate ('\\ud800') is not text" in quotes[2], quotes[2]
    manifest = json.loads((root / "worlds" / WID / "world.json").read_text())
    assert manifest["drafting"]["corrections"] == {"world_brief": 3}


def test_a_drafted_chain_whose_row_product_is_huge_gets_a_repair_message(pack: dict[str, Any],
                                                                         ts: TemplateSet) -> None:
    """Each level within the drafted limits (2,000 rows, 20 per parent); the product down three levels is not."""
    data = copy.deepcopy(pack)
    data["tables"][0]["rows"] = 2000
    parent = data["tables"][0]["name"]
    for name in ("steps", "substeps", "checks"):
        data["tables"].append({"name": name, "singular": name[:-1],
                               "per_parent": {"table": parent, "column": f"{parent[:-1]}_id", "count": [1, 20]},
                               "columns": [{"name": f"{parent[:-1]}_id", "type": "integer", "ref": parent},
                                           {"name": "note", "gen": "sentence"}]})
        parent = name
    out = validate_reply(json.dumps(data), brief_of(ts), ts)
    reason = out.reason  # type: ignore[union-attr]
    assert "pack.json: field 'tables[2:substeps].per_parent.count': gives up to 240,000 rows at scale 0.3" in reason
    assert "a table has at most 25,000" in reason
    assert "pack.json: field 'tables': the tables can get up to" in reason and "a world has at most 60,000" in reason
    data["tables"] = data["tables"][:2]
    data["tables"][0]["rows"] = 40
    assert not hasattr(validate_reply(json.dumps(data), brief_of(ts), ts), "reason")


def test_a_text_briefs_world_runs_the_draft_step_first_in_dagster(tmp_path: Path, templates: Path) -> None:
    """The CLI's runner and the registration sensor pick brief_build (pack_draft, then every stage) for a text
    brief's world, and world_build (no draft step) for the others."""
    from worldfactory_dagster.pipelines.automation import range_requests
    from worldfactory_dagster.pipelines.runner import job_for

    root = data_root(tmp_path)
    (root / "briefs" / "plain.yaml").write_text("domain: help-desk\ncompany_type: small\n")
    store = WorldStore(root=str(root), templates_root=str(templates))
    defs = make_definitions(store)
    assert job_for(defs, store, [WID]).name == "brief_build"
    assert job_for(defs, store, ["brief.plain--v001"]).name == "world_build"
    selected = {k.to_user_string() for k in defs.resolve_job_def("brief_build").asset_layer.executable_asset_keys}
    assert "pack_draft" in selected and "world_brief" in selected
    assert "pack_draft" not in {k.to_user_string()
                                for k in defs.resolve_job_def("world_build").asset_layer.executable_asset_keys}
    runs = range_requests(["a", WID, "b"], size=2, drafted=frozenset({WID}))
    assert [(r.job_name, r.partition_key, r.tags) for r in runs] == [
        ("brief_build", WID, {}), ("world_build", None, {"dagster/asset_partition_range_start": "a",
                                                         "dagster/asset_partition_range_end": "b"})]


def test_a_draft_that_never_proves_stops_the_world_in_dagster(tmp_path: Path, templates: Path, pack: dict[str, Any],
                                                              model_env: pytest.MonkeyPatch) -> None:
    """pack_draft records the failed draft with its cost; its blocking check keeps world_brief from running."""
    root = data_root(tmp_path / "data")
    model = ScriptedReplies([{k: v for k, v in pack.items() if k != "anchor"}])
    model_env.setenv("WORLDFACTORY_LLM_MAX_REPAIRS", "0")
    with LLMServer(model) as url, dg.instance_for_test() as instance:
        model_env.setenv("OPENAI_BASE_URL", url)
        defs = make_definitions(WorldStore(root=str(root), templates_root=str(templates)))
        instance.add_dynamic_partitions("world", [WID])
        result = defs.resolve_job_def("brief_build").execute_in_process(
            instance=instance, partition_key=WID, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}})
    assert not result.success and model.requests == 1
    assert [m.asset_key.path[-1] for m in result.get_asset_materialization_events()] == ["pack_draft"]
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "draft_proven"]
    assert not check.passed and "no draft proved after 1 replies (0 repairs)" in str(check.metadata["reason"].value)
    record = recorded(root)
    assert record.error and record.cost_usd == dollars(model.prompt_tokens, model.completion_tokens) > 0

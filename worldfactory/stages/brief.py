"""world_brief: the company, its modules, rules and clock, and the domain pack it is built from.

A catalog world or a YAML brief takes its pack from world_templates/; a free-text brief
(`data/briefs/<slug>.md`) has its pack drafted by a model and repaired until every stage proves it
(worldfactory.drafting), from the reply cache when it can be. Either way the stage writes the pack
the world is built from as pack.json (the schema stage reads it) and brief.json. A brief that never
proves writes no pack and no brief: its proof fails with the last error, and what it spent is
still recorded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from worldfactory.briefs import brief_path, is_text_brief, load_text_brief, parse_brief_world_id, templates_with
from worldfactory.drafting.record import RECORD, DraftRecord, pack_bytes
from worldfactory.seeds import BRIEF_PREFIX, expand_world
from worldfactory.spec import Brief, DomainPack
from worldfactory.stages.core import BuildContext, Stage, StageError
from worldfactory.templates import TemplateSet

PACK = "pack.json"


def text_brief_file(ctx: BuildContext) -> Path | None:
    """The world's free-text brief file, or None (a catalog world or a YAML brief)."""
    if not ctx.world_id.startswith(f"{BRIEF_PREFIX}.") or ctx.briefs_dir is None:
        return None
    path = brief_path(ctx.briefs_dir, parse_brief_world_id(ctx.world_id)[0])
    return path if is_text_brief(path) else None


def _brief_bytes(brief: Brief) -> bytes:
    return (brief.model_dump_json(indent=1) + "\n").encode()


def make_brief(ctx: BuildContext) -> dict[str, int]:
    text = text_brief_file(ctx)
    if text is not None:
        return _make_drafted(ctx, text)
    (ctx.work.path / RECORD).unlink(missing_ok=True)  # a world that was once a text brief keeps no stale record
    brief = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    ctx.work.write(PACK, pack_bytes(ctx.templates.domains[brief.domain]))
    ctx.work.write("brief.json", _brief_bytes(brief))
    return {"modules": len(brief.modules), "rules": len(brief.rules), "departments": len(brief.departments)}


def _make_drafted(ctx: BuildContext, path: Path) -> dict[str, int]:
    from worldfactory.catalog import write_cost_rows
    from worldfactory.drafting.client import ModelUnavailable, NotCached
    from worldfactory.drafting.config import ENV_MODEL, config_from_env
    from worldfactory.drafting.loop import Spend, draft_until_proven

    brief = load_text_brief(path, ctx.templates)
    cfg = config_from_env(ctx.data_root)
    for name in (PACK, "brief.json", RECORD):  # nothing of an earlier draft survives a failed one
        (ctx.work.path / name).unlink(missing_ok=True)
    spend = Spend()
    try:
        if not cfg.model:
            raise NotCached(f"{path.name} is a free-text brief: name the model that drafts its domain pack "
                            f"(--model or {ENV_MODEL}) and its server (--base-url or OPENAI_BASE_URL)")
        outcome = draft_until_proven(ctx.world_id, path, brief, ctx.templates, cfg, ctx.data_root / "build", spend)
    except NotCached as exc:  # asking again cannot help: the proof fails with this reason
        failed = DraftRecord(model=cfg.model, brief_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                             max_repairs=cfg.max_repairs, error=str(exc))
        ctx.work.write(RECORD, failed.to_bytes())
        return {"attempts": 0, "corrections": 0, "cached_replies": 0, "model_requests": 0}
    except ModelUnavailable:  # the server kept failing: record what was spent, then fail (Dagster retries the step)
        ctx.usage.llm_prompt_tokens, ctx.usage.llm_completion_tokens = spend.prompt_tokens, spend.completion_tokens
        ctx.usage.cost_usd = spend.cost_usd
        ctx.work.write_cost(STAGE.name, ctx.usage)
        write_cost_rows(ctx.data_root / "catalog", ctx.world_id, ctx.work.costs())
        raise
    ctx.usage.llm_prompt_tokens, ctx.usage.llm_completion_tokens = spend.prompt_tokens, spend.completion_tokens
    ctx.usage.cost_usd = spend.cost_usd
    record = outcome.record
    ctx.work.write(RECORD, record.to_bytes())
    counts = {"attempts": len(record.attempts), "corrections": sum(record.corrections.values()),
              "cached_replies": spend.cached, "model_requests": spend.requests - spend.cached}
    if outcome.pack is None:
        return counts
    ctx.work.write(PACK, pack_bytes(outcome.pack))
    drafted = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir, pack=outcome.pack)
    ctx.work.write("brief.json", _brief_bytes(drafted))
    return {**counts, "modules": len(drafted.modules), "rules": len(drafted.rules),
            "departments": len(drafted.departments)}


def world_pack(ctx: BuildContext, stage: str) -> DomainPack:
    """The domain pack this world is built from (its pack.json), parsed once per process."""
    raw = ctx.work.read(PACK, stage)
    key = ("pack", hashlib.sha256(raw).hexdigest())
    if key not in ctx.cache:
        ctx.cache[key] = DomainPack.model_validate_json(raw)
    return ctx.cache[key]


def world_templates(ctx: BuildContext, stage: str) -> TemplateSet:
    """The templates with this world's pack in them: what the schema stage builds the spec from."""
    return templates_with(ctx.templates, world_pack(ctx, stage))


def prove_brief(ctx: BuildContext) -> dict[str, int | float | str]:
    text = text_brief_file(ctx)
    if text is not None:
        return _prove_drafted(ctx, text)
    brief = ctx.brief(STAGE.name)
    expected = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    if brief != expected:
        raise StageError("brief.json does not match the brief its world ID and templates give")
    if ctx.work.read(PACK, STAGE.name) != pack_bytes(ctx.templates.domains[brief.domain]):
        raise StageError(f"pack.json is not the domain pack {brief.domain} of the templates")
    return {"rules": len(brief.rules), "modules": len(brief.modules)}


def _prove_drafted(ctx: BuildContext, path: Path) -> dict[str, int | float | str]:
    record = DraftRecord.model_validate_json(ctx.work.read(RECORD, STAGE.name))
    if record.error:
        raise StageError(f"{ctx.world_id}: {path.name}: {record.error}")
    if record.brief_sha256 != hashlib.sha256(path.read_bytes()).hexdigest():
        raise StageError(f"{path} changed since its pack was drafted; build the world again")
    raw = ctx.work.read(PACK, STAGE.name)
    if hashlib.sha256(raw).hexdigest() != record.pack_sha256:
        raise StageError("pack.json is not the pack the drafting accepted (drafting.json names another hash)")
    brief = ctx.brief(STAGE.name)
    if brief != expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir, pack=world_pack(ctx, STAGE.name)):
        raise StageError("brief.json does not match the brief its world ID, brief file and drafted pack give")
    return {"rules": len(brief.rules), "modules": len(brief.modules), "attempts": len(record.attempts),
            "corrections": sum(record.corrections.values())}


STAGE = Stage(
    name="world_brief",
    check="brief_valid",
    proves=("brief.json validates and matches its seed; pack.json is its domain pack (a drafted one: the one "
            "the repair loop accepted)"),
    make=make_brief,
    prove=prove_brief,
    writes=("brief.json", PACK),
    uses_model=True,
)

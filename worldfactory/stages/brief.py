"""world_brief: the company, its modules, rules and clock, and the domain pack it is built from.

A catalog world or a YAML brief takes its pack from world_templates/. A free-text brief
(`data/briefs/<slug>.md`) takes the pack its draft step recorded (worldfactory.drafts: drafted by a
model and proven with the pipeline by worldfactory.drafting, above the build); this stage only
reads that record, never calls a model and never runs another stage, and fails with what to run
when no draft is recorded. Either way the stage writes the pack the world is built from as
pack.json (the schema stage reads it) and brief.json; a drafted world also keeps the draft's record
(drafting.json) for its world.json and its cost rows.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from worldfactory.briefs import expand_world, model_from_env, templates_with
from worldfactory.drafts import RECORD, DraftRecord, draft_folder, pack_bytes, read_draft, text_brief_file
from worldfactory.spec import Brief, DomainPack
from worldfactory.stages.core import BuildContext, Stage, StageError
from worldfactory.templates import TemplateSet

PACK = "pack.json"


def _text_brief(ctx: BuildContext) -> Path | None:
    return text_brief_file(ctx.world_id, ctx.briefs_dir)


def _brief_bytes(brief: Brief) -> bytes:
    return (brief.model_dump_json(indent=1) + "\n").encode()


def make_brief(ctx: BuildContext) -> dict[str, int]:
    text = _text_brief(ctx)
    if text is not None:
        return _make_drafted(ctx, text)
    (ctx.work.path / RECORD).unlink(missing_ok=True)  # a world that was once a text brief keeps no stale record
    brief = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir)
    ctx.work.write(PACK, pack_bytes(ctx.templates.domains[brief.domain]))
    ctx.work.write("brief.json", _brief_bytes(brief))
    return {"modules": len(brief.modules), "rules": len(brief.rules), "departments": len(brief.departments)}


def draft_command(world_id: str) -> str:
    return f"worldfactory draft {world_id}"


def _make_drafted(ctx: BuildContext, path: Path) -> dict[str, int]:
    """Copy the recorded draft's pack and record into the work folder; no draft recorded: say what to run."""
    for name in (PACK, "brief.json", RECORD):  # nothing of an earlier draft survives a missing one
        (ctx.work.path / name).unlink(missing_ok=True)
    model = model_from_env()
    if not model:
        raise StageError(f"{ctx.world_id}: {path.name} is a free-text brief: its pack is the one the draft step "
                         f"recorded for the drafting model, and no model is named (--model or WORLDFACTORY_LLM_MODEL); "
                         f"draft it first: `{draft_command(ctx.world_id)} --model M --base-url URL`")
    draft = read_draft(path, model)
    if draft is None:
        raise StageError(f"{ctx.world_id}: no draft of {path.name} by {model} is recorded "
                         f"({draft_folder(path, model)}): run the draft step first, `{draft_command(ctx.world_id)}` "
                         f"(or `worldfactory build {ctx.world_id}`, which drafts first when needed)")
    if not draft.proven:
        raise StageError(f"{ctx.world_id}: the draft of {path.name} by {model} did not prove: {draft.record.error} "
                         f"(recorded in {draft.folder}); edit the brief, or allow more repairs "
                         f"(WORLDFACTORY_LLM_MAX_REPAIRS) and run `{draft_command(ctx.world_id)} --force`")
    pack = DomainPack.model_validate_json(draft.pack)
    ctx.work.write(PACK, draft.pack)
    ctx.work.write(RECORD, draft.record.to_bytes())
    drafted = expand_world(ctx.world_id, ctx.templates, ctx.briefs_dir, pack=pack)
    ctx.work.write("brief.json", _brief_bytes(drafted))
    return {"attempts": len(draft.record.attempts), "corrections": sum(draft.record.corrections.values()),
            "modules": len(drafted.modules), "rules": len(drafted.rules), "departments": len(drafted.departments)}


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
    text = _text_brief(ctx)
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
    """The work folder's files alone: the draft step's scratch build proves them the same way."""
    record = DraftRecord.model_validate_json(ctx.work.read(RECORD, STAGE.name))
    if record.error:
        raise StageError(f"{ctx.world_id}: {path.name}: {record.error}")
    if record.brief_sha256 != hashlib.sha256(path.read_bytes()).hexdigest():
        raise StageError(f"{path} changed since its pack was drafted; run `{draft_command(ctx.world_id)}`")
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
    proves=("brief.json validates and matches its seed; pack.json is its domain pack (a free-text brief's: the "
            "one its draft step recorded, drafted by a model and proven with the pipeline)"),
    make=make_brief,
    prove=prove_brief,
    writes=("brief.json", PACK),
)

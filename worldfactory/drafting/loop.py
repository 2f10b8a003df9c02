"""Draft, check, prove, repair: a brief's pack is accepted only when every engine stage proves it.

Each reply is parsed and validated like a hand-written pack (shape with field paths, then every
cross-reference) plus the checks a model's pack gets (worldfactory.drafting.checks); a valid pack
is then built by the engine's own stages, make and prove, in a scratch folder, bundle included.
The first failure goes back to the model in the same conversation, up to `max_repairs` times.
Messages quote no temporary paths, so the same draft fails the same way on every build and the
repair requests hash the same (the reply cache relies on it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from worldfactory.briefs import TextBrief, expand_world, templates_with
from worldfactory.drafting.checks import MAX_ROWS, MAX_TABLES, PACK_FILE, check_drafted
from worldfactory.drafting.client import ChatClient, Reply
from worldfactory.drafting.config import LLMConfig
from worldfactory.drafting.prompt import brief_message, draft_request, repair_message, system_message
from worldfactory.drafts import BRIEF_STAGE, RECORD, Attempt, DraftRecord, Failure, pack_bytes
from worldfactory.packs import check_domain
from worldfactory.spec import DomainPack
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, WorkDir, run_make, run_prove
from worldfactory.template_files import _format_errors
from worldfactory.templates import TemplateSet


@dataclass
class Spend:
    """What this build paid the model (cached replies cost nothing now)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    requests: int = 0
    cached: int = 0
    model_seconds: float = 0.0


@dataclass
class Outcome:
    record: DraftRecord
    pack: DomainPack | None
    spend: Spend = field(default_factory=Spend)


def validate_reply(content: str, brief: TextBrief, templates: TemplateSet) -> DomainPack | Failure:
    """A reply's pack, or why it is not a valid pack (lines naming pack.json and the field path)."""

    def failed(reason: str) -> Failure:
        return Failure(stage=BRIEF_STAGE, check="pack_valid", reason=reason)

    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        return failed(f"{PACK_FILE}: the reply is not one JSON object ({exc.msg} at line {exc.lineno} column "
                      f"{exc.colno})")
    except RecursionError:
        return failed(f"{PACK_FILE}: the reply nests lists or objects too deeply to read; a pack is a few levels "
                      f"deep (tables, columns, generators)")
    if not isinstance(data, dict):
        return failed(f"{PACK_FILE}: the reply is a JSON {type(data).__name__}, not one JSON object (the pack)")
    try:
        odd = unreadable_text(data, "")
    except RecursionError:
        odd = f"{PACK_FILE}: the reply nests lists or objects too deeply to read"
    if odd:
        return failed(odd)
    try:
        pack = DomainPack.model_validate(data)
    except ValidationError as exc:
        return failed(_format_errors(Path(PACK_FILE), exc, data))
    except Exception as exc:  # noqa: BLE001 - a validator that trips over a model's input: the model hears why
        return failed(f"{PACK_FILE}: cannot be read: {type(exc).__name__}: {exc}")
    try:
        lines = check_domain(Path(PACK_FILE), pack, templates.modules)
    except Exception as exc:  # noqa: BLE001 - a pack the checks cannot read goes back to the model
        lines = [f"{PACK_FILE}: cannot be checked: {type(exc).__name__}: {exc}"]
    composed = [m for m in [*pack.modules, *pack.optional_modules] if m in templates.modules]
    reachable = {t.name: t for m in composed for t in templates.modules[m].tables} | {t.name: t for t in pack.tables}
    module_rules = {r.name for m in composed for r in templates.modules[m].rules}
    try:  # every problem at once: a model that hears one at a time spends a round on each
        kind = templates.company_types.get(brief.company_type or templates.catalog.company_types[0])
        lines += check_drafted(pack, data, reachable, set(templates.domains), brief.rules, module_rules,
                               scale=kind.scale if kind is not None else 1.0)
    except Exception as exc:  # noqa: BLE001 - the pack checks' lines already say why, when there are any
        if not lines:
            lines = [f"{PACK_FILE}: cannot be checked: {type(exc).__name__}: {exc}"]
    lines = list(dict.fromkeys(lines))  # the pack checks and the drafted checks both hold SQL to packsql
    return failed("\n".join(lines)) if lines else pack


def unreadable_text(node: Any, loc: str) -> str:
    """Why a parsed reply cannot be kept as text (a lone surrogate such as \\ud800 has no UTF-8), or ''."""
    if isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"{PACK_FILE}: field '{loc or '(top)'}': a lone surrogate ({node[exc.start]!a}) is not text; "
                    f"write the character itself or leave it out")
    elif isinstance(node, dict):
        for key, value in node.items():
            why = unreadable_text(key, loc) or unreadable_text(value, f"{loc}.{key}" if loc else str(key))
            if why:
                return why
    elif isinstance(node, list):
        for i, item in enumerate(node):
            why = unreadable_text(item, f"{loc}[{i}]")
            if why:
                return why
    return ""


class _Quiet:
    """Rewrites the machine's paths out of a message, so a failure reads the same on every build."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = sorted(paths.items(), key=lambda kv: -len(kv[0]))

    def __call__(self, text: str) -> str:
        for path, name in self.paths:
            text = text.replace(path, name)
        return text[:4000]


def prove_pack(world_id: str, pack: DomainPack, brief_file: Path, templates: TemplateSet, scratch: Path,
               record: DraftRecord) -> Failure | None:
    """Build the world from this pack with every engine stage, each proved before the next; the first failure."""
    quiet = _Quiet({str(scratch): "<scratch>", str(templates.root): "<templates>",
                    str(brief_file.parent): "<briefs>"})
    shutil.rmtree(scratch, ignore_errors=True)
    work = WorkDir(scratch / "work", world_id)
    ctx = BuildContext(world_id=world_id, templates=templates_with(templates, pack), work=work,
                       data_root=scratch / "data", briefs_dir=brief_file.parent, inputs="drafted")
    try:
        try:
            brief = expand_world(world_id, templates, brief_file.parent, pack=pack)
        except Exception as exc:  # noqa: BLE001 - a pack the brief cannot be expanded with goes back
            return Failure(stage=BRIEF_STAGE, check="make", reason=quiet(f"{type(exc).__name__}: {exc}"))
        data = pack_bytes(pack)
        work.write(PACK_FILE, data)
        work.write("brief.json", (brief.model_dump_json(indent=1) + "\n").encode())
        work.write(RECORD, record.model_copy(update={"pack_sha256": hashlib.sha256(data).hexdigest(),
                                                     "error": ""}).to_bytes())
        for stage in STAGES:
            if stage.name != BRIEF_STAGE:
                try:
                    run_make(stage, ctx)
                except Exception as exc:  # noqa: BLE001 - any crash of a generator on this pack goes back
                    return Failure(stage=stage.name, check="make", reason=quiet(f"{type(exc).__name__}: {exc}"))
            proof = run_prove(stage, ctx)
            if not proof.passed:
                return Failure(stage=stage.name, check=stage.check, reason=quiet(proof.reason))
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def draft_until_proven(world_id: str, brief_file: Path, brief: TextBrief, templates: TemplateSet, cfg: LLMConfig,
                       scratch_root: Path, spend: Spend | None = None) -> Outcome:
    """Ask for a pack, repair it until it proves or the repairs run out; the record says which and what it cost.

    Raises ModelUnavailable when no reply can be had (offline and not cached, no server, a server
    that keeps failing); what was spent until then is in the caller's `spend`.
    """
    record = DraftRecord(model=cfg.model, brief_sha256=hashlib.sha256(brief_file.read_bytes()).hexdigest(),
                         max_repairs=cfg.max_repairs)
    outcome = Outcome(record=record, pack=None, spend=spend if spend is not None else Spend())
    messages = [{"role": "system", "content": system_message(templates, MAX_TABLES, MAX_ROWS)},
                {"role": "user", "content": brief_message(brief, templates)}]
    client = ChatClient(cfg)
    scratch = scratch_root / f".draft-{world_id}-{os.getpid()}"
    try:
        for attempt in range(cfg.max_repairs + 1):
            reply = client.complete(draft_request(cfg.model, list(messages)))
            _count(outcome, reply)
            messages.append({"role": "assistant", "content": reply.reply.content})
            checked = validate_reply(reply.reply.content, brief, templates)
            failure = checked if isinstance(checked, Failure) else prove_pack(world_id, checked, brief_file,
                                                                               templates, scratch, record)
            record.attempts.append(Attempt(request=reply.key, prompt_tokens=reply.reply.prompt_tokens,
                                           completion_tokens=reply.reply.completion_tokens,
                                           cost_usd=reply.reply.cost_usd, failure=failure))
            if failure is None:
                assert isinstance(checked, DomainPack)
                outcome.pack = checked
                record.pack_sha256 = hashlib.sha256(pack_bytes(checked)).hexdigest()
                break
            if attempt == cfg.max_repairs:
                record.error = (f"no draft proved after {attempt + 1} replies ({attempt} repairs); the last: "
                                f"{failure.line()}")
                break
            record.corrections[failure.stage] = record.corrections.get(failure.stage, 0) + 1
            messages.append({"role": "user", "content": repair_message(failure.where, failure.reason)})
    finally:
        client.close()
    record.prompt_tokens = sum(a.prompt_tokens for a in record.attempts)
    record.completion_tokens = sum(a.completion_tokens for a in record.attempts)
    record.cost_usd = round(sum(a.cost_usd for a in record.attempts), 8)
    return outcome


def _count(outcome: Outcome, reply: Reply) -> None:
    s = outcome.spend
    s.requests += 1
    if reply.cached:
        s.cached += 1
        return
    s.prompt_tokens += reply.reply.prompt_tokens
    s.completion_tokens += reply.reply.completion_tokens
    s.cost_usd = round(s.cost_usd + reply.reply.cost_usd, 8)
    s.model_seconds += reply.seconds

"""The drafts folder: a free-text brief's model-drafted pack, as the draft step recorded it.

The draft step (worldfactory.drafting, above the build) drafts a pack from a free-text brief,
proves it with the pipeline and records it here; the world_brief stage only reads it. Both meet in
this module's formats, so the build never imports drafting.

`<data root>/drafts/<key>/` (the folder beside `briefs/`), where the key is the sha256 of the brief
file's bytes and the drafting model's name: another brief text or another model is another draft.
It holds `drafting.json` (the record: each request's hash, the tokens and dollars its reply cost
when it was made, which stage failed and why, the corrections per stage, the accepted pack's hash
or the last error) and, when a draft proved, `pack.json` (the pack) and `brief.md` (the brief it
was drafted from). The record is written last: a folder without one holds no draft.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from worldfactory.briefs import brief_path, is_text_brief, parse_brief_world_id
from worldfactory.seeds import BRIEF_PREFIX, SeedError
from worldfactory.spec import DomainPack
from worldfactory.templates import TemplateError

DRAFTS = "drafts"  # beside the briefs folder: <data root>/drafts
RECORD = "drafting.json"  # in a draft's folder, and copied into a drafted world's work folder by world_brief
PACK = "pack.json"
BRIEF_COPY = "brief.md"
BRIEF_STAGE = "world_brief"
DRAFT_STEP = "pack_draft"  # the step's name: its Dagster asset, its entry in a drafted world's world.json costs


class Failure(BaseModel):
    """Why a draft was sent back: pack validation (the brief stage), or a stage's make or proof."""

    stage: str
    check: str
    reason: str

    @property
    def where(self) -> str:
        if self.check == "pack_valid":
            return "It fails the pack checks"
        if self.check == "make":
            return f"Stage {self.stage} could not be built from it"
        return f"Stage {self.stage} failed its check '{self.check}'"

    def line(self) -> str:
        return f"{self.where}: {self.reason}"


class Attempt(BaseModel):
    request: str  # sha256 of the request body: its entry in the reply cache
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    failure: Failure | None = None


class DraftRecord(BaseModel):
    """What the conversation decided, never what one run spent or how long it took: a redraft from the reply
    cache writes the same record."""

    model: str
    brief_sha256: str
    max_repairs: int
    attempts: list[Attempt] = Field(default_factory=list)
    corrections: dict[str, int] = Field(default_factory=dict)  # repairs asked for, by the stage that failed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    pack_sha256: str = ""  # the accepted pack.json; empty when no draft proved
    error: str = ""  # the last failure when no draft proved

    def to_bytes(self) -> bytes:
        return (self.model_dump_json(indent=1) + "\n").encode()


def pack_bytes(pack: DomainPack) -> bytes:
    """A pack as the bundle's pack.json: the pack language's own keys in the model's order (not sorted: a
    generator mapping's first key is its kind), values as written, defaults left out."""
    return (json.dumps(pack.model_dump(mode="json", by_alias=True, exclude_defaults=True), indent=1,
                       ensure_ascii=False) + "\n").encode()


def text_brief_file(world_id: str, briefs_dir: Path | None) -> Path | None:
    """A world's free-text brief file (`<slug>.md`), or None: a catalog world, a YAML brief, no such file."""
    if not world_id.startswith(f"{BRIEF_PREFIX}.") or briefs_dir is None:
        return None
    try:
        path = brief_path(briefs_dir, parse_brief_world_id(world_id)[0])
    except (SeedError, TemplateError):
        return None
    return path if is_text_brief(path) and path.is_file() else None


def drafts_dir(briefs_dir: Path) -> Path:
    """Where a briefs folder's drafts are: its sibling `drafts/` (data/briefs -> data/drafts)."""
    return briefs_dir.parent / DRAFTS


def draft_key(brief: bytes, model: str) -> str:
    """The draft of this brief text by this model."""
    return hashlib.sha256(b"brief\0" + hashlib.sha256(brief).hexdigest().encode() + b"\0model\0"
                          + model.encode()).hexdigest()


def draft_folder(brief_file: Path, model: str) -> Path:
    """The folder of a brief file's draft by a model (it may not exist yet)."""
    return drafts_dir(brief_file.parent) / draft_key(brief_file.read_bytes(), model)


class Draft(BaseModel):
    folder: Path
    record: DraftRecord
    pack: bytes = b""  # pack.json's bytes; empty when the draft failed

    @property
    def proven(self) -> bool:
        return bool(self.record.pack_sha256) and not self.record.error


def read_draft(brief_file: Path, model: str) -> Draft | None:
    """The recorded draft of a brief file by a model, or None when none is recorded (or it is unreadable).

    A proven draft whose pack.json does not hash to what its record says is treated as absent."""
    folder = draft_folder(brief_file, model)
    try:
        record = DraftRecord.model_validate_json((folder / RECORD).read_bytes())
    except (OSError, ValueError):
        return None
    if record.error or not record.pack_sha256:
        return Draft(folder=folder, record=record)
    try:
        pack = (folder / PACK).read_bytes()
    except OSError:
        return None
    if hashlib.sha256(pack).hexdigest() != record.pack_sha256:
        return None
    return Draft(folder=folder, record=record, pack=pack)


def _write(path: Path, data: bytes) -> None:
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_draft(brief_file: Path, record: DraftRecord, pack: DomainPack | None) -> Draft:
    """Record a draft: the pack and the brief's copy first, the record last (what makes it a draft)."""
    folder = draft_folder(brief_file, record.model)
    folder.mkdir(parents=True, exist_ok=True)
    data = b""
    if pack is not None:
        data = pack_bytes(pack)
        _write(folder / PACK, data)
        _write(folder / BRIEF_COPY, brief_file.read_bytes())
    else:
        (folder / PACK).unlink(missing_ok=True)
    _write(folder / RECORD, record.to_bytes())
    return Draft(folder=folder, record=record, pack=data)


def recorded_pack_sha256(brief_file: Path, model: str) -> str:
    """The recorded draft's pack hash, "failed" for a failed draft, "none" when no draft is recorded: what a
    drafted world's inputs fingerprint hashes (another accepted pack builds another world)."""
    draft = read_draft(brief_file, model)
    if draft is None:
        return "none"
    return draft.record.pack_sha256 if draft.proven else "failed"


def add_to_manifest(record: DraftRecord, manifest: dict[str, Any]) -> None:
    """world.json of a drafted world: the draft step's tokens and dollars (what the conversation cost) and its
    corrections, the corrections per stage, and a `drafting` summary."""
    costs = manifest.setdefault("costs", {})
    for stage, entry in costs.items():
        entry["corrections"] = record.corrections.get(stage, 0)
    costs[DRAFT_STEP] = {"corrections": sum(record.corrections.values()), "cost_usd": record.cost_usd,
                         "llm_prompt_tokens": record.prompt_tokens, "llm_completion_tokens": record.completion_tokens}
    manifest["drafting"] = {
        "model": record.model, "attempts": len(record.attempts),
        "corrections": dict(sorted(record.corrections.items())),
        "llm_prompt_tokens": record.prompt_tokens, "llm_completion_tokens": record.completion_tokens,
        "cost_usd": record.cost_usd, "requests": [a.request for a in record.attempts],
        "brief_sha256": record.brief_sha256, "pack_sha256": record.pack_sha256,
    }

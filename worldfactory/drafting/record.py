"""What a drafted world keeps of its conversation: drafting.json in the work folder, a summary in world.json.

The record holds only what the conversation itself decides (each request's hash, the tokens and
dollars its reply cost when it was made, which stage failed and why, the corrections per stage and
the accepted pack's hash), never what this build spent or how long it took, so a rebuild from the
reply cache writes the same record and the same world.json. What a build spent goes to the
`costs` catalog and the Dagster metadata instead (zero when every reply came from the cache).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from worldfactory.spec import DomainPack

RECORD = "drafting.json"  # in the work folder (not a bundle file): world.json carries its summary
BRIEF_STAGE = "world_brief"


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


def add_to_manifest(record: DraftRecord, manifest: dict[str, Any]) -> None:
    """world.json of a drafted world: the conversation's tokens, dollars and corrections per stage."""
    costs = manifest.setdefault("costs", {})
    for stage, entry in costs.items():
        entry["corrections"] = record.corrections.get(stage, 0)
    brief = costs.setdefault(BRIEF_STAGE, {})
    brief.update({"llm_prompt_tokens": record.prompt_tokens, "llm_completion_tokens": record.completion_tokens,
                  "cost_usd": record.cost_usd})
    manifest["drafting"] = {
        "model": record.model, "attempts": len(record.attempts),
        "corrections": dict(sorted(record.corrections.items())),
        "llm_prompt_tokens": record.prompt_tokens, "llm_completion_tokens": record.completion_tokens,
        "cost_usd": record.cost_usd, "requests": [a.request for a in record.attempts],
        "brief_sha256": record.brief_sha256, "pack_sha256": record.pack_sha256,
    }

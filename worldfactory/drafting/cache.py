"""Every drafting request and its reply, kept by the hash of the request.

The key is the sha256 of the request body in canonical JSON (sorted keys, no spaces): the model,
the whole conversation and the response format. The same brief text, model and engine ask the
same thing, so a rebuild finds every reply here and calls no model; a changed brief or model
asks something new. Tokens and dollars are kept with each reply: what the request cost when it was made.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError


class CachedReply(BaseModel):
    content: str  # the reply message's content: the pack as JSON text (or whatever the model sent)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


def canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def request_key(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(body)).hexdigest()


class ReplyCache:
    """`<folder>/<key>.json`: {"request": body, "reply": CachedReply}; written beside, then renamed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            return CachedReply.model_validate(json.loads(path.read_bytes())["reply"])
        except (json.JSONDecodeError, KeyError, TypeError, ValidationError):
            return None  # a damaged entry is asked again, and replaced

    def put(self, key: str, body: dict[str, Any], reply: CachedReply) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"request": body, "reply": reply.model_dump()}, sort_keys=True, indent=1,
                          ensure_ascii=False).encode() + b"\n"
        tmp = self.folder / f".{key}.tmp-{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, self.path(key))

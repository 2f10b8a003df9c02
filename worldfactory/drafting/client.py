"""One chat-completions request through the `openai` client, answered from the reply cache when it can be.

HTTP 429 and 5xx are retried by the client with exponential backoff (it honours Retry-After);
a server that keeps failing raises ModelUnavailable, which the Dagster asset retries again later.
`--offline` (WORLDFACTORY_LLM_OFFLINE) never calls a model: a request that is not cached is an error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import openai

from worldfactory.drafting.cache import CachedReply, ReplyCache, request_key
from worldfactory.drafting.config import ENV_BASE_URL, ENV_MODEL, LLMConfig
from worldfactory.drafting.errors import DraftError


class ModelUnavailable(DraftError):
    """No reply could be had: the server kept failing (HTTP errors after the client's retries, timeouts)."""


class NotCached(ModelUnavailable):
    """A request that is not in the reply cache, and no model may or can be asked (offline, no server)."""


@dataclass
class Reply:
    key: str  # the request's hash: its cache entry
    reply: CachedReply
    cached: bool  # answered from the cache: nothing spent now
    seconds: float  # time waiting for the model (0 when cached)


class ChatClient:
    def __init__(self, cfg: LLMConfig) -> None:
        self.cfg = cfg
        self.cache = ReplyCache(cfg.cache_dir)
        self._client: openai.OpenAI | None = None

    def complete(self, body: dict[str, Any]) -> Reply:
        key = request_key(body)
        hit = self.cache.get(key)
        if hit is not None:
            return Reply(key, hit, True, 0.0)
        if self.cfg.offline:
            raise NotCached(f"request {key[:12]} is not in the reply cache ({self.cfg.cache_dir}) and "
                                   f"--offline forbids calling a model; build once with a model reachable")
        if not self.cfg.base_url:
            raise NotCached(f"request {key[:12]} is not in the reply cache ({self.cfg.cache_dir}); name a "
                                   f"model server with --base-url or {ENV_BASE_URL}")
        if self._client is None:
            self._client = openai.OpenAI(base_url=self.cfg.base_url, api_key=self.cfg.api_key or "unused",
                                         max_retries=self.cfg.request_retries, timeout=self.cfg.timeout_s)
        started = time.perf_counter()
        try:
            out = self._client.chat.completions.create(**body)
        except openai.APIError as exc:
            raise ModelUnavailable(f"{self.cfg.base_url}: {type(exc).__name__}: {exc} (after "
                                   f"{self.cfg.request_retries} retries); check the server and {ENV_MODEL}") from exc
        seconds = time.perf_counter() - started
        prompt = out.usage.prompt_tokens if out.usage is not None else 0
        completion = out.usage.completion_tokens if out.usage is not None else 0
        content = out.choices[0].message.content if out.choices else None
        reply = CachedReply(content=as_text(content or ""), prompt_tokens=prompt, completion_tokens=completion,
                            cost_usd=self.cfg.cost_usd(prompt, completion))
        self.cache.put(key, body, reply)
        return Reply(key, reply, False, seconds)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def as_text(content: str) -> str:
    """The reply as text that UTF-8 can hold: a lone surrogate (which a JSON reply can carry as \\ud800)
    becomes its escape, so the cache and the record can write it and the pack check names it to the model."""
    try:
        content.encode("utf-8")
        return content
    except UnicodeEncodeError:
        return content.encode("utf-8", "backslashreplace").decode("utf-8")

"""A chat-completions agent over any OpenAI-compatible server (vLLM, Ollama, a hosted API).

The world's tools become OpenAI function tools (their JSON schemas unchanged); each turn the
model's tool calls run through the episode, so they are validated, atomic and traced like any
other call. A tool call whose arguments are not valid JSON is answered with an error message
the model can act on. HTTP 429 and 5xx are retried by the client with backoff (`request_retries`);
a server that keeps failing raises RolloutError, so no rollout rows are written for that run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai

from worldfactory.policies.base import EpisodeResult, RolloutError
from worldfactory.runtime.world import World

MALFORMED_LIMIT = 3  # tool calls with unreadable arguments in one episode before the run is called broken

SYSTEM = (
    "You operate the internal software of {company}, a fictional {kind} company; today is {clock}. "
    "Use the tools to do what the user asks. Look records up by the names and numbers the user gives. "
    "If a company rule forbids a request, do not do it and say which rule. When you are done, reply "
    "with a short final message; if the user asked a question, that message is your answer."
)


def openai_tools(world: World) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"][:1000],
                                              "parameters": t["input_schema"]}} for t in world.tool_manifest]


class ChatAgent:
    """One client per rollout run; `run` plays one episode of one task."""

    def __init__(self, world: World, cfg: Any) -> None:
        if not cfg.base_url or not cfg.model:
            raise ValueError("the openai policy needs --base-url and --model (any OpenAI-compatible server)")
        self.world = world
        self.cfg = cfg
        self.tools = openai_tools(world)
        self.client = openai.AsyncOpenAI(base_url=cfg.base_url, api_key=cfg.api_key or "unused",
                                         max_retries=cfg.request_retries, timeout=120.0)
        b = world.brief
        self.system = SYSTEM.format(company=b.company_name, kind=f"{b.company_type} {b.domain.replace('-', ' ')}",
                                    clock=b.clock)

    async def close(self) -> None:
        await self.client.close()

    async def run(self, task_id: str, seed: int) -> EpisodeResult:
        started = time.perf_counter()
        task = self.world.task(task_id)
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system},
                                          {"role": "user", "content": task.instruction}]
        prompt = completion = malformed = 0
        answer: Any = None
        with self.world.episode(task_id) as ep:
            for _ in range(self.cfg.max_turns):
                try:
                    reply = await self.client.chat.completions.create(
                        model=self.cfg.model, messages=messages, tools=self.tools, seed=seed % (2**31),
                        temperature=0.0)
                except openai.APIError as exc:
                    raise RolloutError(f"{self.cfg.base_url}: {type(exc).__name__}: {exc} "
                                       f"(after {self.cfg.request_retries} retries); check the server") from exc
                if reply.usage is not None:
                    prompt += reply.usage.prompt_tokens
                    completion += reply.usage.completion_tokens
                msg = reply.choices[0].message
                calls = msg.tool_calls or []
                messages.append({"role": "assistant", "content": msg.content or "",
                                 **({"tool_calls": [c.model_dump() for c in calls]} if calls else {})})
                if not calls:
                    answer = (msg.content or "").strip() or None
                    break
                for call in calls:
                    content, ok = self._call(ep, call.function.name, call.function.arguments)
                    malformed += not ok
                    if malformed >= MALFORMED_LIMIT:
                        raise RolloutError(f"{self.cfg.base_url}: the model sent {malformed} tool calls whose "
                                           f"arguments are not a JSON object (task {task_id}); check the model "
                                           f"and its tool-call template")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            verdict = ep.verify(answer if task.answer is not None else None)
            cost = (prompt * self.cfg.price_in_per_mtok + completion * self.cfg.price_out_per_mtok) / 1e6
            return EpisodeResult(world_id=self.world.world_id, task_id=task_id, policy=self.cfg.label, seed=seed,
                                 answer=answer, steps=len(ep.trace), trace=list(ep.trace), verdict=verdict,
                                 prompt_tokens=prompt, completion_tokens=completion, cost_usd=round(cost, 8),
                                 seconds=round(time.perf_counter() - started, 6))

    @staticmethod
    def _call(ep: Any, name: str, raw_args: str) -> tuple[str, bool]:
        """Run one tool call; (message for the model, whether its arguments could be read)."""
        try:
            args = json.loads(raw_args or "{}")
        except json.JSONDecodeError as exc:
            return json.dumps({"error": f"the arguments of {name} are not valid JSON ({exc.msg}); "
                                        f"send a JSON object"}), False
        if not isinstance(args, dict):
            return json.dumps({"error": f"the arguments of {name} must be a JSON object"}), False
        res = ep.call(name, args)
        return json.dumps({"result": res.result} if res.ok else {"error": res.error}, default=str), True

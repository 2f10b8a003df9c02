"""Rewards for TRL's GRPOTrainer from a world's verifiers.

    from worldfactory.adapters.trl_grpo import WorldReward
    reward = WorldReward({"insurance-claims.regional--v001": world})    # or url=..., token=... (one served world)
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=exported_dataset, ...)

A completion is a plan: the tool calls it writes (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
the Hermes convention most chat templates use) run in order in a fresh episode of its row's task,
then the world's verifier grades the episode's end state, with the answer in `<answer>...</answer>`
(JSON, or the text as a string) for tasks that ask a question. The reward is the verifier's, 1.0 or
0.0. Tool results are not fed back to the model: this is single-turn GRPO on whole plans (for multi-turn
tool use, where TRL runs each call and the model sees its result, see worldfactory.adapters.trl_env).

The dataset is `worldfactory export`'s: TRL passes its `world_id` and `task_id` columns to the
reward function. `tiny_causal_lm()` builds a randomly initialised model and a byte-level tokenizer
offline, to check the plumbing without downloading anything (it learns nothing useful).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from worldfactory.env import WorldEnv

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or (conversational datasets) a list of messages."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")


def parse_plan(text: str) -> tuple[list[dict[str, Any]], Any]:
    """The tool calls and the answer a completion writes; a call that is not JSON is kept as a call
    to no tool (it fails and changes nothing, as a model's malformed call should)."""
    calls = []
    for raw in TOOL_CALL.findall(text):
        try:
            call = json.loads(raw)
        except json.JSONDecodeError:
            call = {"name": "", "arguments": {}}
        calls.append(call if isinstance(call, dict) else {"name": "", "arguments": {}})
    answers = ANSWER.findall(text)
    answer: Any = None
    if answers:
        try:
            answer = json.loads(answers[-1])
        except json.JSONDecodeError:
            answer = answers[-1]
    return calls, answer


class WorldReward:
    """A GRPO reward function: each completion's plan runs in a fresh episode; the world's verifier grades it.

    `worlds` maps world IDs to a World, a bundle path or a built world ID (in process); or give
    `url` and `token` of `worldfactory serve --transport http` (its one world, over HTTP and MCP).
    `self.seen` keeps (world_id, task_id, tool calls, reward) per completion, for logs and tests.
    """

    def __init__(self, worlds: Mapping[str, Any] | None = None, *, url: str | None = None, token: str | None = None,
                 max_calls: int = 32) -> None:
        if (worlds is None) == (url is None):
            raise ValueError("give worlds (world ID -> World, bundle path or ID) or a server url, not both")
        self.__name__ = "world_verifier"  # TRL logs each reward function under its __name__
        self.max_calls = max_calls
        self.url, self.token = url, token
        self.envs: dict[str, WorldEnv] = {wid: WorldEnv(w) for wid, w in (worlds or {}).items()}
        self.seen: list[tuple[str, str, int, float]] = []

    def _env(self, world_id: str) -> WorldEnv:
        if world_id not in self.envs:
            if self.url is None:
                raise KeyError(f"world '{world_id}' (a row's world_id) is not one of {sorted(self.envs)}")
            self.envs[world_id] = WorldEnv(url=self.url, token=self.token)
        return self.envs[world_id]

    def score(self, world_id: str, task_id: str, text: str) -> float:
        """One completion's reward."""
        env = self._env(world_id)
        env.reset(task_id=task_id)
        calls, answer = parse_plan(text)
        for call in calls[: self.max_calls]:
            env.step(call)
        reward = env.verify(answer)
        self.seen.append((world_id, task_id, len(calls), reward))
        return reward

    def __call__(self, prompts: list[Any], completions: list[Any], world_id: list[str], task_id: list[str],
                 **kwargs: Any) -> list[float]:
        return [self.score(w, t, completion_text(c)) for c, w, t in zip(completions, world_id, task_id, strict=True)]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


def tiny_causal_lm(seed: int = 0, hidden: int = 32, layers: int = 2, context: int = 16384) -> tuple[Any, Any]:
    """A randomly initialised Llama-shaped model and a byte-level tokenizer, built offline.

    The tokenizer carries Qwen3's chat template (TRL's copy), so TRL knows how to parse its tool calls
    (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`, the Hermes convention) and the model can
    run TRL's multi-turn tool loop (environment_factory) as a real Qwen3 would. For smoke runs of the
    plumbing (a few GRPO steps on CPU in seconds); it learns nothing useful.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(specials + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                        padding_side="left")
    tokenizer.chat_template = qwen3_chat_template
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=context, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=True)
    return LlamaForCausalLM(config), tokenizer

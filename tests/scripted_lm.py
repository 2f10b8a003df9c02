"""A tiny causal LM that plays a script, for TRL runs in tests (no download, no network).

It is tiny_causal_lm's random Llama (trainable: GRPO's loss and gradients go through it) whose
next-token logits, while generating, are pushed toward a scripted reply: for the conversation's
n-th assistant turn it writes replies[instruction][n], token by token, then the end-of-turn token.
The turn is read from the tokens themselves (the assistant headers the chat template wrote), so
TRL's own tool loop drives it: it calls a tool, TRL runs it and appends the result, and the model
writes its next turn. A conversation with no script says "Done.". `model.shown` keeps the context at the
start of every turn it wrote, so a test can see that tool results reached the model.
"""

from __future__ import annotations

from typing import Any

PUSH = 1e4  # added to the scripted token's logit: sampling at any temperature picks it


def scripted_lm(replies: dict[str, list[str]], seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer): the model writes `replies[instruction]`, one reply per assistant turn."""
    import torch
    from transformers import LlamaForCausalLM

    from worldfactory.adapters.trl_grpo import tiny_causal_lm

    base, tokenizer = tiny_causal_lm(seed=seed)
    header = tokenizer.encode("<|im_start|>assistant\n")
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    scripts = {instruction: [tokenizer.encode(r) + [end] for r in rs] for instruction, rs in replies.items()}
    done = tokenizer.encode("Done.") + [end]
    shown: list[str] = []

    def next_token(ids: list[int]) -> int:
        starts = [i for i in range(len(ids) - len(header) + 1) if ids[i:i + len(header)] == header]
        text = tokenizer.decode(ids[:starts[-1]] if starts else ids)
        script = next((s for instruction, s in scripts.items() if instruction in text), [])
        turn = len(starts) - 1
        reply = script[turn] if 0 <= turn < len(script) else done
        written = len(ids) - (starts[-1] + len(header)) if starts else 0
        if written == 0:  # a turn starts: keep what the model was shown (tool results included)
            shown.append(tokenizer.decode(ids))
        return reply[written] if written < len(reply) else end

    class ScriptedLM(LlamaForCausalLM):
        scripting = False
        rows: list[list[int]] | None = None  # the sequences being generated: the prompt, then each new token

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            self.scripting, self.rows = True, None
            try:
                return super().generate(*args, **kwargs)
            finally:
                self.scripting, self.rows = False, None

        def forward(self, input_ids: Any = None, **kwargs: Any) -> Any:
            out = super().forward(input_ids=input_ids, **kwargs)
            if self.scripting and input_ids is not None:
                # with the KV cache the first call gets the whole prompt, each later one the token just chosen
                if self.rows is None:
                    self.rows = input_ids.tolist()
                else:
                    for row, ids in zip(self.rows, input_ids[:, -1:].tolist(), strict=True):
                        row.extend(ids)
                push = torch.zeros_like(out.logits[:, -1, :])
                for row, ids in enumerate(self.rows):
                    push[row, next_token(ids)] = PUSH
                out.logits[:, -1, :] = out.logits[:, -1, :] + push
            return out

    model = ScriptedLM(base.config)
    model.load_state_dict(base.state_dict())
    model.shown = shown  # the context at the start of each generated turn, in order
    return model, tokenizer

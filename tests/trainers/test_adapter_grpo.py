"""A GRPO smoke run with TRL on a tiny random model on CPU: rewards come from the world's verifiers.

This proves the plumbing (exported rows -> prompts -> completions -> episodes -> verifier -> reward),
not learning. One module-scoped run: two steps, two completions per prompt, 16 new tokens.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from worldfactory.adapters.hf_dataset import export_rows, to_dataset
from worldfactory.adapters.trl_grpo import WorldReward, parse_plan, tiny_causal_lm
from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"
STEPS, GENERATIONS = 2, 2


def oracle_plan(world: World, task_id: str) -> str:
    task = world.task(task_id)
    calls = "".join(f"<tool_call>{json.dumps({'name': c.tool, 'arguments': c.args})}</tool_call>\n"
                    for c in task.oracle)
    return calls + (f"<answer>{json.dumps(task.answer)}</answer>" if task.answer is not None else "")


@pytest.fixture(scope="module")
def rows(worlds_dir: Path) -> list[dict[str, Any]]:
    return export_rows([worlds_dir / w for w in EXAMPLES])


@pytest.fixture(scope="module")
def grpo_run(worlds: dict[str, World], rows: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, Any]]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)  # a 32-wide model: more threads only spin against the test workers
    picked = [r for r in rows if r["world_id"] == WORLD][:STEPS]  # one prompt per step
    reward = WorldReward({WORLD: worlds[WORLD]})
    model, tokenizer = tiny_causal_lm(seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")), max_steps=STEPS,
                      per_device_train_batch_size=GENERATIONS, num_generations=GENERATIONS,
                      max_completion_length=16, learning_rate=1e-3, logging_steps=1, report_to="none",
                      save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True, shuffle_dataset=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=to_dataset(picked),
                          processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    yield {"picked": picked, "reward": reward, "trainer": trainer, "before": before,
           "seconds": time.perf_counter() - start}
    reward.close()


def test_grpo_steps_get_rewards_from_the_verifier(grpo_run: dict[str, Any]) -> None:
    reward, trainer = grpo_run["reward"], grpo_run["trainer"]
    assert trainer.state.global_step == STEPS
    # Every completion was graded in its row's own world and task, GENERATIONS per prompt.
    graded = [(w, t) for w, t, _, _ in reward.seen]
    assert graded == [(WORLD, r["task_id"]) for r in grpo_run["picked"] for _ in range(GENERATIONS)]
    logged = [h["rewards/world_verifier/mean"] for h in trainer.state.log_history if "rewards/world_verifier/mean" in h]
    seen = [r for *_, r in reward.seen]
    assert len(logged) == STEPS and logged == [sum(seen[i:i + GENERATIONS]) / GENERATIONS
                                               for i in range(0, len(seen), GENERATIONS)]
    print(f"GRPO smoke: {STEPS} steps in {grpo_run['seconds']:.1f} s, rewards seen {seen}")


def test_reward_is_the_verifiers(worlds: dict[str, World], rows: list[dict[str, Any]]) -> None:
    world = worlds[WORLD]
    reward = WorldReward({WORLD: world})
    task_ids = [r["task_id"] for r in rows if r["world_id"] == WORLD][:3]
    plans = [oracle_plan(world, t) for t in task_ids]
    assert reward([None] * 3, plans, [WORLD] * 3, task_ids) == [1.0, 1.0, 1.0]
    # The same plan with its last call dropped, no plan at all, or a malformed call: the verifier says no.
    cut = ["\n".join(p.split("\n")[:-2]) for p in plans]
    assert reward([None], [cut[0]], [WORLD], task_ids[:1]) == [0.0]
    assert reward([None, None], ["I cannot help.", "<tool_call>{not json</tool_call>"], [WORLD] * 2,
                  task_ids[:2]) == [0.0, 0.0]
    # Conversational completions (a list of messages) are read too; episodes never leak into each other.
    convo = [[{"role": "assistant", "content": plans[1]}]]
    assert reward([None], convo, [WORLD], [task_ids[1]]) == [1.0]
    assert reward([None], ["nothing"], [WORLD], [task_ids[1]]) == [0.0]
    with pytest.raises(KeyError, match="is not one of"):
        reward([None], ["x"], ["other-world--v001"], [task_ids[0]])
    assert parse_plan('<tool_call>{"name": "a", "arguments": {}}</tool_call><answer>"x"</answer>') == (
        [{"name": "a", "arguments": {}}], "x")
    reward.close()

"""TRL's multi-turn tool use (GRPOTrainer(environment_factory=...)) on a world: the environment owns the
episode and the reward, TRL's own tool loop runs the model's calls and feeds the results back.

The model is tiny_causal_lm's random Llama playing a script (tests/scripted_lm.py): one tool call per
turn, as a real model would, so the run shows what TRL does with a world, not what a random model
writes. Rewards are the world verifier's: a task solved scores 1, the same plan with a step dropped 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worldfactory.adapters.hf_dataset import export_rows, to_dataset
from worldfactory.runtime.world import World

WORLD = "insurance-claims.regional--v001"


def short_write_tasks(world: World, n: int) -> list[str]:
    """Curated tasks that change state (doing nothing fails), ask no question and take 2-4 calls."""
    curated = sorted(json.loads(line)["task_id"] for line in world.files["curated_tasks.jsonl"].decode().splitlines())
    found = [t for t in curated if world.task(t).answer is None and 2 <= len(world.task(t).oracle) <= 4
             and world.episode(t).verify(None).reward == 0.0]
    assert len(found) >= n, found
    return found[:n]


def call_text(tool: str, args: dict[str, Any]) -> str:
    return f'<tool_call>\n{json.dumps({"name": tool, "arguments": args})}\n</tool_call>'


def test_the_environment_is_the_worlds_tools_episode_and_verifier(worlds: dict[str, World]) -> None:
    from transformers.utils import get_json_schema

    from worldfactory.adapters.trl_env import world_environment

    world = worlds[WORLD]
    env_cls = world_environment(world)
    env = env_cls()
    manifest = {t["name"]: t for t in world.tool_manifest}
    # every tool of the world is a method TRL can offer, with the world's parameters, required ones and enums
    for name, tool in manifest.items():
        schema = get_json_schema(getattr(env, name))["function"]
        props = tool["input_schema"].get("properties", {})
        assert schema["name"] == name and set(schema["parameters"]["properties"]) == set(props)
        assert sorted(schema["parameters"].get("required", [])) == sorted(tool["input_schema"].get("required", []))
        for pname, prop in props.items():
            enum = next((o.get("enum") for o in prop.get("anyOf", [prop]) if o.get("enum")), None)
            assert schema["parameters"]["properties"][pname].get("enum") == enum, (name, pname)
    assert get_json_schema(env.submit_answer)["function"]["parameters"]["required"] == ["answer"]
    task = short_write_tasks(world, 1)[0]
    oracle = world.task(task).oracle
    env.reset(task_id=task, world_id=WORLD, prompt=[])  # TRL passes the whole row
    results = [json.loads(getattr(env, c.tool)(**c.args)) for c in oracle]
    assert all("result" in r for r in results) and env.get_reward() == 1.0
    env.reset(task_id=task)  # a fresh episode: the last one's writes are gone; the plan with a step dropped fails
    for c in oracle[:-1]:
        getattr(env, c.tool)(**c.args)
    assert env.get_reward() == 0.0 and env.verdict and env.verdict["mismatches"]
    refused = json.loads(getattr(env, oracle[-1].tool)(unexpected_field=1))  # the tool's schema refuses it
    assert "unexpected_field" in refused["error"]
    # a question: the answer goes through submit_answer, JSON or text
    asks = next(t for t in sorted(world.tasks) if world.task(t).answer is not None)
    env.reset(task_id=asks)
    for c in world.task(asks).oracle:
        getattr(env, c.tool)(**c.args)
    env.submit_answer(json.dumps(world.task(asks).answer))
    assert env.get_reward() == 1.0
    env.reset(task_id=asks)
    env.submit_answer("I do not know")
    assert env.get_reward() == 0.0
    with pytest.raises(ValueError, match="not tools of this world"):
        world_environment(world, tools=["no_such_tool"])


def test_prompts_render_the_tools_and_the_call_protocol_through_the_chat_template(worlds_dir: Path,
                                                                                  worlds: dict[str, World]) -> None:
    from worldfactory.adapters.trl_env import chat_tools, render_prompts, world_environment
    from worldfactory.adapters.trl_grpo import tiny_causal_lm

    _, tokenizer = tiny_causal_lm()
    rows = export_rows([worlds_dir / WORLD])[:2]
    tools = chat_tools(world_environment(worlds[WORLD]))
    texts = render_prompts(rows, tokenizer, tools)
    for row, text in zip(rows, texts, strict=True):
        assert row["instruction"] in text and text.endswith("<|im_start|>assistant\n")
        assert "<tools>" in text and "<tool_call>" in text  # the template's own protocol
        for tool in tools:
            assert json.dumps(tool["function"]["name"]) in text
    bare = render_prompts(rows[:1], tokenizer, [])
    assert "<tools>" not in bare[0]  # the tools come from the argument, not from the template


@pytest.fixture(scope="module")
def grpo_env_run(worlds: dict[str, World], worlds_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[dict[str, Any]]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from tests.scripted_lm import scripted_lm
    from worldfactory.adapters.trl_env import world_environment

    torch.set_num_threads(1)
    world = worlds[WORLD]
    solved, cut = short_write_tasks(world, 2)
    rows = {r["task_id"]: r for r in export_rows([worlds_dir / WORLD])}
    # one call per turn; the second task's script drops its last call
    replies = {world.task(solved).instruction: [call_text(c.tool, c.args) for c in world.task(solved).oracle],
               world.task(cut).instruction: [call_text(c.tool, c.args) for c in world.task(cut).oracle[:-1]]}
    used = sorted({c.tool for t in (solved, cut) for c in world.task(t).oracle})
    env_cls = world_environment(world, tools=used)  # a few tools: every prompt holds their schemas
    model, tokenizer = scripted_lm(replies)
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo-env")), max_steps=2, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=6000, learning_rate=1e-3, logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                      shuffle_dataset=False, max_tool_calling_iterations=8)
    trainer = GRPOTrainer(model=model, args=args, train_dataset=to_dataset([rows[solved], rows[cut]]),
                          processing_class=tokenizer, environment_factory=env_cls)
    trainer.train()
    yield {"trainer": trainer, "model": model, "env_cls": env_cls, "solved": solved, "cut": cut, "world": world}


def test_grpo_runs_multi_turn_tool_use_with_the_environments_reward(grpo_env_run: dict[str, Any]) -> None:
    trainer, model, world = grpo_env_run["trainer"], grpo_env_run["model"], grpo_env_run["world"]
    assert trainer.state.global_step == 2
    name = grpo_env_run["env_cls"].__name__
    logged = [h[f"rewards/{name}/mean"] for h in trainer.state.log_history if f"rewards/{name}/mean" in h]
    assert logged == [1.0, 0.0], trainer.state.log_history  # solved, then the plan with its last call dropped
    # TRL's loop fed each call's result back: every later turn starts after a tool response of the world
    solved = world.task(grpo_env_run["solved"])
    turns = [s for s in model.shown if solved.instruction in s]
    assert len(turns) >= len(solved.oracle) + 1
    later = [s for s in turns if s.count("<|im_start|>assistant") > 1]
    assert later and all("<tool_response>" in s for s in later)
    assert all('\\"result\\"' in s or '"result"' in s for s in later)

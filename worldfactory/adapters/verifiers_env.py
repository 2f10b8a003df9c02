"""A world as an environment for Prime Intellect's `verifiers` (v1): its curated tasks as a taskset,
and an Env that plays the world to the agent, turn by turn, with the reward from the world's verifier.

    cfg = WorldEnvConfig(taskset=WorldTasksetConfig(id=TASKSET_ID, world="insurance-claims.regional--v001"))
    env = vf.load_environment(cfg)          # or: --env.taskset.id worldfactory-verifiers --env.taskset.world ...

The env plays the user, as verifiers' own OpenEnv env does: the first turn is the task's instruction
and the world's tool schemas; each assistant reply runs its tool calls (`<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`, the Hermes convention; several per reply are run in order) and the
results come back as the next turn; a reply without a tool call ends the episode, its answer in
`<answer>...</answer>` (JSON, or the text). The world's verifier grades the end state: the trace's
reward `world_verifier` is 1.0 or 0.0. Episodes run in process (`world`: a built world ID or bundle
path) or against `worldfactory serve --transport http` (`url`, `token`), one isolated episode each.

verifiers finds a taskset by a top-level module name: the package `worldfactory_verifiers` re-exports
this module's Taskset and Env, so the taskset id `worldfactory-verifiers` loads both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import model_validator

from worldfactory.adapters.trl_grpo import parse_plan
from worldfactory.env import AsyncWorldEnv, openai_tools

TASKSET_ID = "worldfactory-verifiers"  # the package worldfactory_verifiers re-exports this module


class WorldTaskData(vf.TaskData):
    world_id: str
    task_id: str


class WorldTasksetConfig(vf.TasksetConfig):
    world: str | None = None
    """A built world ID or a bundle path: episodes run in this process (tools confined)."""
    url: str | None = None
    """Or a `worldfactory serve --transport http` server: episodes run there, over MCP."""
    token: str | None = None
    """The server's control token (default $WORLDFACTORY_CONTROL_TOKEN)."""
    all_tasks: bool = False
    """Every task the world serves, not only the curated ones (the pass band)."""
    max_turns: int = 32
    """Tool-calling replies before the episode is graded as it stands."""

    @model_validator(mode="after")
    def one_source(self) -> WorldTasksetConfig:
        if (self.world is None) == (self.url is None):
            raise ValueError("set exactly one of `world` (in process) and `url` (a worldfactory server)")
        return self


class WorldTask(vf.Task[WorldTaskData]):
    """One task of the world; the Env grades it (the reward needs the episode's end state)."""


def _open_world(ref: str) -> Any:
    from worldfactory import confine
    from worldfactory.cli import resolve_world

    return confine.open_world(resolve_world(ref))


class WorldTaskset(vf.Taskset[WorldTask, WorldTasksetConfig]):
    def __init__(self, config: WorldTasksetConfig) -> None:
        super().__init__(config)
        self.world: Any = _open_world(config.world) if config.world else None

    def _tasks(self) -> tuple[str, list[tuple[str, bool]]]:
        if self.world is not None:
            from worldfactory.env import _curated_ids

            curated = set(_curated_ids(self.world))
            return self.world.world_id, [(t, t in curated) for t in sorted(self.world.tasks)]
        import os

        import httpx2

        from worldfactory.runtime.control import ENV_TOKEN

        token = self.config.token or os.environ.get(ENV_TOKEN, "")
        base = (self.config.url or "").rstrip("/")
        r = httpx2.get(f"{base}/control/tasks", headers={"authorization": f"Bearer {token}"}, timeout=60)
        if r.status_code != 200:
            raise RuntimeError(f"GET {base}/control/tasks: HTTP {r.status_code}: {r.text[:300]}")
        health = httpx2.get(f"{base}/healthz", timeout=60)
        world_id = health.json().get("world_id", base) if health.status_code == 200 else base
        return world_id, sorted((t["task_id"], bool(t["curated"])) for t in r.json())

    def load(self) -> Iterator[WorldTask]:
        world_id, tasks = self._tasks()
        for task_id, curated in tasks:
            if curated or self.config.all_tasks:
                yield WorldTask(WorldTaskData(id=task_id, name=f"{world_id}/{task_id}", world_id=world_id,
                                              task_id=task_id), self.config.task)


def first_turn(obs: dict[str, Any]) -> str:
    """The instruction, the tools and the reply protocol, as the user's first message."""
    return (f"{obs['instruction']}\n\nYou can call these tools (JSON Schema parameters):\n"
            f"{json.dumps(openai_tools(obs['tools']), sort_keys=True)}\n\n"
            'Call a tool with <tool_call>{"name": "...", "arguments": {...}}</tool_call>; its result comes back '
            "as the next message. When you are done, reply without a tool call; if the task asks a question, "
            "put the answer in <answer>...</answer> (JSON).")


class WorldEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class WorldVerifiersEnv(vf.Env[WorldEnvConfig]):
    """Plays one episode of the world per task: tool calls in, results out, then the verifier's reward."""

    def _episode(self) -> AsyncWorldEnv:
        config = self.taskset.config
        if config.world is not None:
            return AsyncWorldEnv(self.taskset.world)
        return AsyncWorldEnv(url=config.url, token=config.token)

    async def run(self, task: WorldTask, agents: Any) -> None:
        env = self._episode()
        calls = 0
        try:
            obs = await env.reset(task_id=task.data.task_id)
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(first_turn(obs))
                answer: Any = None
                for _ in range(self.taskset.config.max_turns):
                    tool_calls, answer = parse_plan(segment.last_reply or "")
                    if segment.terminated or not tool_calls:
                        break
                    results = [await env.step(call) for call in tool_calls]
                    calls += len(results)
                    segment = await interaction.turn(json.dumps(results if len(results) > 1 else results[0],
                                                                sort_keys=True, default=str))
                else:
                    interaction.trace.stop("max_turns")
                reward = await env.verify(answer)
            trace = interaction.trace
            trace.record_reward("world_verifier", reward)
            trace.record_metric("tool_calls", float(calls))
            trace.info["worldfactory"] = {"task_id": task.data.task_id, "verdict": env.verdict}
        finally:
            await env.close()


__all__ = ["WorldTaskset", "WorldVerifiersEnv"]

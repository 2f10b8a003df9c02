"""A world as an environment for Prime Intellect's `verifiers` (v1): its curated tasks as a taskset,
and an Env that plays the world to the agent, turn by turn, with the reward from the world's verifier.

    vf-eval worldfactory-verifiers --env.taskset.world insurance-claims.regional--v001 \
        --env.taskset.families '["lookup_act"]' -n 5 -r 3 -m MODEL \
        --client.base-url http://HOST/v1 --client.api-key-var KEY_VAR --no-push

    cfg = WorldEnvConfig(taskset=WorldTasksetConfig(id=TASKSET_ID, world="insurance-claims.regional--v001"))
    env = vf.load_environment(cfg)          # the same from Python

The env plays the user, as verifiers' own OpenEnv env does: the first turn is the task's instruction
and the world's tool schemas; each assistant reply runs its tool calls (`<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`, the Hermes convention; several per reply are run in order) and the
results come back as the next turn; a reply without a tool call ends the episode, its answer in
`<answer>...</answer>` (JSON, or the text). The world's verifier grades the end state: the trace's
reward `world_verifier` is 1.0 or 0.0. Episodes run in process (`world`: a built world ID or bundle
path) or against `worldfactory serve --transport http` (`url`, `token`), one isolated episode each.

verifiers finds a taskset by a top-level module name: the package `worldfactory_verifiers` (installed
beside `worldfactory`, setup.py) re-exports this module's Taskset and Env, so the taskset id
`worldfactory-verifiers` loads both. The player defaults to verifiers' null harness in a local subprocess
(the env itself plays the world; no sandbox service is needed); `--env.player.*` changes it.

A model or provider error is not a score: an episode whose trace or run recorded an error raises
ModelCallFailed from `run_slot`, so `vf-eval` stops and exits 1 with the error, instead of printing
the reward 0.0 of an episode the model never played.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import model_validator
from verifiers.v1.harnesses.null import NullHarnessConfig
from verifiers.v1.runtimes import SubprocessConfig

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
    families: list[str] = []
    """Only tasks of these families (e.g. `["lookup_act", "bulk"]`); empty keeps every family."""
    task_ids: list[str] = []
    """Only these tasks; empty keeps every task (verifiers' `--select.*` picks from what is left)."""
    max_turns: int = 32
    """Tool-calling replies before the episode is graded as it stands."""

    @model_validator(mode="after")
    def one_source(self) -> WorldTasksetConfig:
        # Both unset is valid here: verifiers builds this config without arguments to narrow its CLI
        # (and for `--help`); WorldTaskset says what is missing when it loads.
        if self.world is not None and self.url is not None:
            raise ValueError("set one of `world` (in process) and `url` (a worldfactory server), not both")
        return self


class ModelCallFailed(RuntimeError):
    """An episode could not be played: the model, its provider or the harness failed. Not a reward of 0."""


class WorldTask(vf.Task[WorldTaskData]):
    """One task of the world; the Env grades it (the reward needs the episode's end state)."""


def _open_world(ref: str) -> Any:
    from worldfactory import confine
    from worldfactory.data_root import resolve_world

    return confine.open_world(resolve_world(ref))


class WorldTaskset(vf.Taskset[WorldTask, WorldTasksetConfig]):
    def __init__(self, config: WorldTasksetConfig) -> None:
        if config.world is None and config.url is None:
            raise ValueError("worldfactory-verifiers: set the world, --env.taskset.world WORLD (a built world ID or "
                             "bundle path), or a server, --env.taskset.url URL (`worldfactory serve --transport http`)")
        super().__init__(config)
        self.world: Any = _open_world(config.world) if config.world else None

    def _tasks(self) -> tuple[str, list[tuple[str, bool, str]]]:
        """The world ID and its tasks as (task_id, curated, family), sorted."""
        if self.world is not None:
            from worldfactory.env import _curated_ids

            curated = set(_curated_ids(self.world))
            return self.world.world_id, [(t, t in curated, self.world.task(t).family) for t in sorted(self.world.tasks)]
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
        return world_id, sorted((t["task_id"], bool(t["curated"]), str(t.get("family", ""))) for t in r.json())

    def load(self) -> Iterator[WorldTask]:
        world_id, tasks = self._tasks()
        cfg = self.config
        families = {f for _, _, f in tasks}
        unknown = sorted(set(cfg.families) - families)
        if unknown:
            raise ValueError(f"worldfactory-verifiers: --env.taskset.families: {unknown} not in {world_id} "
                             f"(its families: {sorted(families)})")
        missing = sorted(set(cfg.task_ids) - {t for t, _, _ in tasks})
        if missing:
            raise ValueError(f"worldfactory-verifiers: --env.taskset.task_ids: {missing} not in {world_id}")
        for task_id, curated, family in tasks:
            if cfg.families and family not in cfg.families or cfg.task_ids and task_id not in cfg.task_ids:
                continue
            if curated or cfg.all_tasks or task_id in cfg.task_ids:
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
    player: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig(), harness=NullHarnessConfig(id="null"))
    """The agent the world is played to: the null harness (the env relays each turn) in a local process."""


def episode_errors(episode: Any) -> list[str]:
    """The errors an episode recorded, its own and its traces', as 'Type: message' lines."""
    errors = [*episode.errors, *(e for trace in episode.traces for e in trace.errors)]
    return [f"{e.type}: {e.message}" + (f" (HTTP {e.status_code})" if e.status_code else "") for e in errors]


class WorldVerifiersEnv(vf.Env[WorldEnvConfig]):
    """Plays one episode of the world per task: tool calls in, results out, then the verifier's reward."""

    def _episode(self) -> AsyncWorldEnv:
        config = self.taskset.config
        if config.world is not None:
            return AsyncWorldEnv(self.taskset.world)
        return AsyncWorldEnv(url=config.url, token=config.token)

    async def run_slot(self, slot: Any, *args: Any, **kwargs: Any) -> Any:
        """verifiers' slot (with its retries), then: an episode that recorded an error fails the run."""
        episode = await super().run_slot(slot, *args, **kwargs)
        errors = episode_errors(episode)
        if errors:
            raise ModelCallFailed(f"{slot.task.data.name}: the episode failed, not graded: " + "; ".join(errors))
        return episode

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


__all__ = ["WorldTaskset", "WorldVerifiersEnv"]  # verifiers' plugin loader reads these

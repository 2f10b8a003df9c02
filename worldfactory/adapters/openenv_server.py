"""A world as an OpenEnv environment server: OpenEnv's reset/step/state contract, MCP-shaped actions.

    from worldfactory.adapters.openenv_server import create_openenv_app
    app = create_openenv_app("insurance-claims.regional--v001")   # a FastAPI app: serve it with uvicorn

The app is OpenEnv's own (`openenv.core.env_server.create_fastapi_app`, from the `openenv-core`
package): `/ws` holds one session per connection, each with its own environment and so its own
episode; `/reset`, `/step`, `/state`, `/schema`, `/metadata` and `/health` are as OpenEnv defines them.
Actions are OpenEnv's MCP actions: `ListToolsAction` lists the world's tools and `CallToolAction`
calls one, so OpenEnv's `MCPToolClient` drives a world unchanged. `reset(task_id=..., seed=...)`
starts an episode of that task (or draws a curated one, seeded); its observation has world_id,
task_id and instruction (`WorldEnvClient`, an MCPToolClient, keeps them in the observation's
metadata). The episode ends with the pseudo-tool `submit_answer` ({"answer": ...}): the world's
verifier grades the state the agent left, and that observation carries the reward (1.0 or 0.0),
done=True and the verifier's mismatches; `state()` has the episode, task, step count and reward.
Tool calls get reward 0.0; a refused call's result is {"error": ...} and changes nothing.

The server holds one loaded world; episodes are isolated copies of its seed state, as everywhere else.
Only the `/ws` session (what OpenEnv's clients use) keeps an episode across steps: OpenEnv's plain
HTTP `/reset` and `/step` each run on a fresh environment. `/metadata` has the world's README and
its generator version with the bundle's hash.

`worldfactory serve WORLD --transport http --openenv` serves this app beside MCP and the control
plane on one port (OpenEnv answers every path those do not: /ws, /reset, /step, /state, /schema,
/metadata, /health), behind the same Host and Origin guards; `worldfactory image WORLD --openenv`
builds an image that does so on port 8000, for OpenEnv's `from_docker_image`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from openenv.core.mcp_client import MCPToolClient

from worldfactory.env import _curated_ids, draw_task
from worldfactory.requester import ASK_TOOL, ask_tool_entry

SUBMIT = "submit_answer"
SUBMIT_TOOL = Tool(name=SUBMIT, description=(
    "End the episode: the world's verifier grades the state you left. Pass the answer when the task asks a "
    "question (a value, a list or an object), or null when it asks for changes."),
    input_schema={"type": "object", "properties": {"answer": {}}, "additionalProperties": False})


class WorldObservation(Observation):
    """reset()'s observation: the task (OpenEnv sends an observation's fields, never its metadata)."""

    world_id: str
    task_id: str
    instruction: str


class WorldState(State):
    world_id: str = ""
    task_id: str | None = None
    done: bool = False
    reward: float | None = None


class WorldOpenEnv(Environment):
    """One session's environment: one episode of the world at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, world: Any) -> None:
        super().__init__()
        self.world = world
        self.curated = _curated_ids(world)
        self.tools = [Tool(name=t["name"], description=t["description"], input_schema=t["input_schema"])
                      for t in world.tool_manifest] + [SUBMIT_TOOL]
        self.episode: Any = None
        self._state = WorldState(world_id=world.world_id)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **kwargs: Any) -> Observation:
        self.close()
        task_id = task_id or draw_task(list(self.world.tasks), self.curated, seed)
        task = self.world.task(task_id)  # an unknown task is a clear WorldError, before anything changes
        self.episode = self.world.episode(task_id)
        self._state = WorldState(episode_id=episode_id or uuid.uuid4().hex, world_id=self.world.world_id,
                                 task_id=task_id)
        return WorldObservation(world_id=self.world.world_id, task_id=task_id, instruction=task.instruction)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=self._episode_tools(), done=self._state.done)
        if not isinstance(action, CallToolAction):
            raise ValueError(f"unsupported action {type(action).__name__}: use list_tools or call_tool")
        name = action.tool_name
        if self.episode is None or self._state.done:
            why = "call reset() first" if self.episode is None else "the episode has ended; call reset()"
            return CallToolObservation(tool_name=name, done=self._state.done, reward=self._state.reward,
                                       error=ToolError(error_type=ToolErrorType.EXECUTION_ERROR, message=why))
        self._state.step_count += 1
        if name == SUBMIT:
            verdict = self.episode.verify(action.arguments.get("answer"))
            self._state.done, self._state.reward = True, float(verdict.reward)
            mismatches = [m.model_dump(mode="json") for m in verdict.mismatches]
            return CallToolObservation(tool_name=name, done=True, reward=float(verdict.reward), result={
                "passed": verdict.passed, "reward": verdict.reward, "mismatches": mismatches})
        if name not in self.world.tools_by_name and not (name == ASK_TOOL and self.episode.requester is not None):
            return CallToolObservation(tool_name=name, reward=0.0, error=ToolError(
                error_type=ToolErrorType.TOOL_NOT_FOUND, message=f"no tool '{name}' in this world"))
        step = self.episode.call(name, action.arguments)
        self.episode.trace.clear()  # the server keeps no per-step history: the observation is the record
        if not step.ok:  # a refused or failed call changes nothing; the agent reads why
            return CallToolObservation(tool_name=name, result={"error": step.error}, reward=0.0)
        return CallToolObservation(tool_name=name, result=step.result, reward=0.0)

    def _episode_tools(self) -> list[Tool]:
        """The world's tools, and ask_requester while the episode's task has a requester (its topics an enum)."""
        if self.episode is None or self.episode.requester is None:
            return self.tools
        ask = ask_tool_entry(self.episode.task)
        return [*self.tools[:-1], Tool(name=ask["name"], description=ask["description"],
                                       input_schema=ask["input_schema"]), self.tools[-1]]

    @property
    def state(self) -> WorldState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """What OpenEnv's /metadata shows: the world's own README (its card) and the generator version that
        made it, with the bundle's sha256 (world.json's), so a client can tell which build it is talking to."""
        files = getattr(self.world, "files", {})
        readme = files.get("README.md", b"").decode() or None
        manifest = json.loads(files["world.json"]) if "world.json" in files else {}
        version = manifest.get("generator_version")
        if version is not None and "world.json" in files:
            version = f"{version}+{hashlib.sha256(files['world.json']).hexdigest()[:12]}"
        return EnvironmentMetadata(name=self.world.world_id, readme_content=readme, version=version,
                                   author="WorldFactory", description=(
            f"A WorldFactory world: {len(self.world.tasks)} tasks, {len(self.tools) - 1} MCP tools; "
            f"end an episode with {SUBMIT}."))

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None


class WorldEnvClient(MCPToolClient):
    """OpenEnv's MCPToolClient that also keeps reset()'s task: `(await env.reset()).observation.metadata`
    has world_id, task_id and instruction (the stock client keeps only tool observations)."""

    def _parse_result(self, payload: dict[str, Any]) -> Any:
        result = super()._parse_result(payload)
        obs = payload.get("observation", {})
        if "instruction" in obs:
            result.observation.metadata.update({k: obs[k] for k in ("world_id", "task_id", "instruction")})
        return result


def create_openenv_app(world: Any, max_sessions: int = 1000) -> Any:
    """OpenEnv's FastAPI app over one world (a World, a bundle path or a built world ID); at most
    `max_sessions` concurrent `/ws` sessions, each its own episode."""
    if isinstance(world, str | Path):
        from worldfactory import confine
        from worldfactory.data_root import resolve_world

        world = confine.open_world(resolve_world(str(world)))
    return create_fastapi_app(lambda: WorldOpenEnv(world), Action, Observation, max_concurrent_envs=max_sessions)

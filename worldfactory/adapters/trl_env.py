"""A world as a TRL `environment_factory`: multi-turn tool use, the episode and the reward owned by the world.

    from trl import GRPOConfig, GRPOTrainer
    from worldfactory.adapters.trl_env import world_environment
    Env = world_environment("insurance-claims.regional--v001")   # a World, a bundle path or a built world ID
    GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=exported_tasks, environment_factory=Env).train()

TRL (>= 1.16) makes one instance per rollout and calls `reset(**row)` with the dataset row (the
export's `task_id` picks the task); every public method is a tool the model sees through its chat
template, with the schema TRL derives from the method's signature and docstring, and TRL's tool
loop runs the model's calls and feeds their results back turn by turn. Here the methods are the
world's own tools (tools.json: names, types, enums, descriptions), each running in the rollout's
episode, plus `submit_answer` for the tasks that ask a question. After the rollout TRL calls
`get_reward()`: the world's verifier grades the state the model left (1.0 or 0.0). Nothing else
scores it, so `reward_funcs` is not needed.

`render_prompts` renders exported rows through a tokenizer's chat template with the world's tools,
for trainers that take text prompts: the tools and the template's own tool-call protocol are in
the prompt, as the model will see them when it is served.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from worldfactory.env import WorldEnv, openai_tools
from worldfactory.requester import ASK_TOOL, ask_tool_entry

SUBMIT = "submit_answer"
SUBMIT_DOC = """End the task with your answer, when the task asks a question.

Args:
    answer: The answer: JSON (a number, a string, a list or an object) or plain text.
"""
# JSON Schema types as the Python hints transformers turns back into the same schema types
PY_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                            "object": dict}


class WorldToolEnv:
    """The base of every world's environment class (see world_environment); one rollout's episode."""

    world: ClassVar[Any] = None
    url: ClassVar[str | None] = None
    token: ClassVar[str | None] = None
    max_calls: ClassVar[int] = 64

    def __init__(self) -> None:
        self._env = WorldEnv(self.world) if self.url is None else WorldEnv(url=self.url, token=self.token)
        self._answer: Any = None
        self._calls = 0
        self.task_id: str | None = None

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> None:
        """A fresh episode of the row's task (its other columns are ignored); the prompt already holds the task."""
        self._answer, self._calls = None, 0
        self.task_id = self._env.reset(task_id=task_id, seed=seed)["task_id"]
        return None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call in this rollout's episode; the result (or the refusal) as JSON text for the model."""
        self._calls += 1
        if self._calls > self.max_calls:
            return json.dumps({"error": f"more than {self.max_calls} tool calls in one episode; stop and answer"})
        out = self._env.step({"name": name, "arguments": {k: v for k, v in arguments.items() if v is not None}})
        body = {"result": out["result"]} if out["ok"] else {"error": out["error"]}
        return json.dumps(body, sort_keys=True, default=str)

    def submit_answer(self, answer: str) -> str:
        """Replaced per world by a method with SUBMIT_DOC (see world_environment)."""
        try:
            self._answer = json.loads(answer) if isinstance(answer, str) else answer
        except json.JSONDecodeError:
            self._answer = answer
        return json.dumps({"submitted": True})

    def get_reward(self) -> float:
        """The world's verifier on the episode's end state, with the submitted answer: 1.0 or 0.0."""
        return self._env.verify(self._answer)

    @property
    def verdict(self) -> dict[str, Any] | None:
        """The last get_reward's details: passed, reward, mismatches."""
        return self._env.verdict


def _hint(schema: dict[str, Any]) -> tuple[Any, list[Any] | None]:
    """A property's Python hint (Optional when null is allowed) and its enum values, from its JSON Schema."""
    options = schema.get("anyOf", [schema])
    nullable = any(o.get("type") == "null" for o in options)
    main = next((o for o in options if o.get("type") != "null"), {})
    kind = main.get("type", "string")
    hint = PY_TYPES.get(kind if isinstance(kind, str) else "string", str)
    return (hint | None) if nullable else hint, main.get("enum")


def tool_method(tool: dict[str, Any]) -> Any:
    """A method named after the world tool, whose signature and Google-style docstring give TRL (through
    transformers' get_json_schema) the tool's parameters: types, required ones, enums and descriptions."""
    name = tool["name"]
    schema = tool["input_schema"]
    required = set(schema.get("required", []))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for pname, prop in sorted(schema.get("properties", {}).items(), key=lambda kv: (kv[0] not in required, kv[0])):
        hint, enum = _hint(prop)
        default = inspect.Parameter.empty if pname in required else None
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[pname] = hint
        text = " ".join(str(prop.get("description") or pname).split())
        if pname not in required and prop.get("default") is not None:
            text += f" (default {json.dumps(prop['default'])})"
        doc_args.append(f"    {pname}: {text}" + (f" (choices: {json.dumps(enum)})" if enum else ""))

    def method(self: WorldToolEnv, **arguments: Any) -> str:
        return self._call(name, arguments)

    annotations["return"] = str
    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    description = " ".join(str(tool.get("description") or name).split())
    method.__doc__ = description + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "") + "\n"
    return method


def _submit_method() -> Any:
    def submit_answer(self: WorldToolEnv, answer: str) -> str:
        return WorldToolEnv.submit_answer(self, answer)

    submit_answer.__doc__ = SUBMIT_DOC
    return submit_answer


def ask_entry(world: Any) -> dict[str, Any] | None:
    """ask_requester as a method of the class: TRL fixes a class's tools, so it is there for every task, its
    topics those of all the world's tasks; in a task without a requester the episode refuses it. A server's
    world (world is None) lists it in the episodes of the tasks that have one."""
    tasks = list(getattr(world, "tasks", {}).values())
    known = sorted({topic for task in tasks for topic in task.requester})
    if not known:
        return None
    entry = ask_tool_entry(next(task for task in tasks if task.requester))
    entry["input_schema"]["properties"]["topic"]["enum"] = known
    return entry


def world_environment(world: Any = None, *, url: str | None = None, token: str | None = None,
                      tools: Iterable[str] | None = None, max_calls: int = 64) -> type[WorldToolEnv]:
    """The environment class of one world, for `GRPOTrainer(environment_factory=...)`.

    `world`: a World, a bundle path or a built world ID (opened once, shared by every rollout's
    episode); or `url` and `token` of `worldfactory serve --transport http`. `tools`: expose only
    these tools (default: all the world's tools; a world has tens of them, and each is in every
    prompt). At most `max_calls` tool calls per episode.
    """
    from worldfactory.env import _Local, _Remote

    if (world is None) == (url is None):
        raise ValueError("give a world (World, bundle path or built world ID) or a server url, not both")
    if world is not None:
        local = _Local(world)
        world, manifest = local.world, local.tools
    else:
        remote = _Remote(url or "", token)
        try:
            manifest = remote.reset(None, 0)["tools"]
        finally:
            remote.close()
    by_name = {t["name"]: t for t in manifest}
    asks = ask_entry(world)  # the requester, for a world with tasks that have one (ask_requester)
    if asks is not None:
        by_name.setdefault(ASK_TOOL, asks)
    chosen = sorted(by_name) if tools is None else list(dict.fromkeys(tools))
    unknown = [t for t in chosen if t not in by_name]
    if unknown:
        raise ValueError(f"tools {unknown} are not tools of this world (it has {len(by_name)}, e.g. "
                         f"{', '.join(sorted(by_name)[:8])})")
    if SUBMIT in by_name:
        raise ValueError(f"the world has a tool named {SUBMIT}, which the environment keeps for the answer")
    members: dict[str, Any] = {name: tool_method(by_name[name]) for name in chosen}
    members.update(submit_answer=_submit_method(), world=world, url=url, token=token, max_calls=max_calls,
                   tool_schemas=[by_name[n] for n in chosen])
    world_id = getattr(world, "world_id", url or "world")
    cls_name = "World_" + "".join(c if c.isalnum() else "_" for c in str(world_id))
    return type(cls_name, (WorldToolEnv,), {**members, "__doc__": f"Episodes of {world_id} for TRL."})


def chat_tools(env: type[WorldToolEnv]) -> list[dict[str, Any]]:
    """The environment's tools in the chat-completions `tools=` form: the world's own schemas and submit_answer."""
    submit = {"name": SUBMIT, "description": SUBMIT_DOC.split("\n")[0],
              "input_schema": {"type": "object", "properties": {"answer": {
                  "type": "string", "description": "JSON (a number, a string, a list or an object) or plain text"}},
                               "required": ["answer"]}}
    return openai_tools([*env.tool_schemas, submit])  # type: ignore[attr-defined]


def render_prompts(rows: Iterable[Mapping[str, Any]], tokenizer: Any, tools: list[dict[str, Any]]) -> list[str]:
    """Each row's `prompt` (chat messages) as the text the model sees: its chat template with `tools`
    (chat-completions form, e.g. chat_tools(env) or json.loads of the export's tools table) and the
    generation prompt. The template writes the tool-call protocol (e.g. <tool_call> tags) itself."""
    return [tokenizer.apply_chat_template(list(row["prompt"]), tools=tools, add_generation_prompt=True,
                                          tokenize=False) for row in rows]


__all__ = ["WorldToolEnv", "chat_tools", "render_prompts", "tool_method", "world_environment"]

"""A world as a reinforcement-learning environment: reset, step, verify.

    env = WorldEnv("insurance-claims.regional--v001")          # in process (tools run confined)
    env = WorldEnv(url="http://127.0.0.1:8100", token=TOKEN)   # against `worldfactory serve --transport http`
    obs = env.reset(task_id=None, seed=0)    # {"episode_id", "task_id", "instruction", "tools"}
    out = env.step({"name": "search_claims", "arguments": {"status": "open"}})   # {"ok", "result", "error"}
    reward = env.verify(answer=None)         # 1.0 or 0.0; env.verdict has passed and mismatches

In process, the world's generated code runs in the confined worker (see worldfactory.confine)
unless the process opted out. Against a server, the episode is created through the control
plane and the tool calls go over MCP to the episode's own mcp_url, exactly as an agent's would.
`reset()` without a task draws one (seeded) from the world's curated tasks (the pass band), or
from all its tasks when none are curated. AsyncWorldEnv is the same API with `await`, and
EnvBatch runs many episodes at once.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

ToolCall = dict[str, Any] | tuple[str, dict[str, Any]]


def parse_tool_call(tool_call: Any) -> tuple[str, Any]:
    """(name, arguments) from {"name", "arguments"}, an OpenAI tool call ({"function": {...}}) or a pair."""
    if isinstance(tool_call, tuple | list) and len(tool_call) == 2:
        return str(tool_call[0]), tool_call[1]
    if hasattr(tool_call, "model_dump"):
        tool_call = tool_call.model_dump()
    if not isinstance(tool_call, dict):
        raise TypeError("a tool call is {'name', 'arguments'}, an OpenAI tool call, or (name, arguments)")
    call = tool_call.get("function", tool_call)
    args = call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            args = {"_": args}  # refused by the tool's schema check, as a model's malformed call should be
    return str(call.get("name", "")), args


def openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool schemas (as reset returns them) in the chat-completions `tools=` format."""
    return [{"type": "function", "function": {"name": t["name"], "description": t.get("description", "")[:1024],
                                              "parameters": t["input_schema"]}} for t in tools]


def draw_task(task_ids: list[str], curated: list[str], seed: int | None) -> str:
    pool = sorted(curated) or sorted(task_ids)
    if not pool:
        raise ValueError("this world has no tasks to draw from; pass task_id")
    return random.Random(seed).choice(pool)


def _curated_ids(world: Any) -> list[str]:
    raw = getattr(world, "files", {}).get("curated_tasks.jsonl", b"")
    return [json.loads(line)["task_id"] for line in raw.decode().splitlines() if line.strip()
            if json.loads(line)["task_id"] in world.tasks]


# --- in process ---------------------------------------------------------------------------------------

class _Local:
    def __init__(self, world: Any) -> None:
        if isinstance(world, str | Path):
            from worldfactory import confine
            from worldfactory.data_root import resolve_world

            world = confine.open_world(resolve_world(str(world)))
        self.world = world
        self.episode: Any = None
        self.tools = [{"name": t["name"], "description": t["description"], "input_schema": t["input_schema"],
                       "annotations": t.get("annotations", {})} for t in world.tool_manifest]
        self.curated = _curated_ids(world)

    def reset(self, task_id: str | None, seed: int | None) -> dict[str, Any]:
        self.close()
        task_id = task_id or draw_task(list(self.world.tasks), self.curated, seed)
        self.episode = self.world.episode(task_id)
        tools = self.tools if self.episode.task is None or not self.episode.task.requester else [
            {"name": t["name"], "description": t["description"], "input_schema": t["input_schema"],
             "annotations": t.get("annotations", {})} for t in self.episode.tool_entries()]
        return {"episode_id": None, "task_id": task_id, "instruction": self.world.task(task_id).instruction,
                "tools": tools}

    def ask(self, message: str) -> dict[str, Any]:
        step = self.episode.ask(message)
        self.episode.trace.clear()
        return {"ok": step.ok, "reply": (step.result or {}).get("answer"), "error": step.error}

    def step(self, name: str, args: Any) -> dict[str, Any]:
        step = self.episode.call(name, args)
        self.episode.trace.clear()
        return {"ok": step.ok, "result": step.result, "error": step.error}

    def verify(self, answer: Any) -> dict[str, Any]:
        v = self.episode.verify(answer)
        return {"passed": v.passed, "reward": v.reward, "mismatches": [m.model_dump(mode="json") for m in v.mismatches]}

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None


# --- against a server -----------------------------------------------------------------------------------

def _mcp_result(body: dict[str, Any]) -> dict[str, Any]:
    if "error" in body:
        return {"ok": False, "result": None, "error": str(body["error"].get("message", body["error"]))}
    res = body["result"]
    text = "".join(c.get("text", "") for c in res.get("content", []))
    if res.get("isError"):
        return {"ok": False, "result": None, "error": text}
    return {"ok": True, "result": res.get("structuredContent"), "error": None}


class _RemoteBase:
    def __init__(self, url: str, token: str | None) -> None:
        import os

        from worldfactory.runtime.control import ENV_TOKEN

        self.url = url.rstrip("/")
        self.token = token or os.environ.get(ENV_TOKEN, "")
        self.control_headers = {"authorization": f"Bearer {self.token}"}
        self.episode_id: str | None = None
        self.mcp_url = ""
        self.session = ""
        self.ids = 0
        self.tools: list[dict[str, Any]] = []

    def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        return {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}

    @staticmethod
    def _initialize_params() -> dict[str, Any]:
        return {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "worldfactory-env", "version": "1"}}

    def _mcp_headers(self) -> dict[str, str]:
        return {"accept": "application/json, text/event-stream", "mcp-session-id": self.session,
                "mcp-protocol-version": "2025-11-25"}

    @staticmethod
    def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"name": t["name"], "description": t.get("description", ""), "input_schema": t["inputSchema"],
                 "annotations": t.get("annotations", {})} for t in body["result"]["tools"]]

    @staticmethod
    def _checked(response: Any, status: int = 200) -> Any:
        if response.status_code != status:
            raise RuntimeError(f"{response.request.method} {response.request.url.path}: HTTP {response.status_code}: "
                               f"{response.text[:300]}")
        return response.json() if response.content else None


class _Remote(_RemoteBase):
    def __init__(self, url: str, token: str | None) -> None:
        import httpx2

        super().__init__(url, token)
        self.http = httpx2.Client(base_url=self.url, timeout=60)

    def reset(self, task_id: str | None, seed: int | None) -> dict[str, Any]:
        self.close_episode()
        if task_id is None:
            tasks = self._checked(self.http.get("/control/tasks", headers=self.control_headers))
            task_id = draw_task([t["task_id"] for t in tasks], [t["task_id"] for t in tasks if t["curated"]], seed)
        made = self._checked(self.http.post("/control/episodes", json={"task_id": task_id},
                                            headers=self.control_headers), 201)
        self.episode_id, self.mcp_url = made["episode_id"], made["mcp_url"]
        init = self.http.post(self.mcp_url, json=self._rpc("initialize", self._initialize_params()))
        self._checked(init)
        self.session = init.headers["mcp-session-id"]
        asks = bool(made.get("requester_topics"))  # its tool list has ask_requester: listed for this episode
        if not self.tools or asks:
            tools = self._tools(self._checked(self.http.post(self.mcp_url, json=self._rpc("tools/list", {}),
                                                             headers=self._mcp_headers())))
            if not asks:
                self.tools = tools
        else:
            tools = self.tools
        return {"episode_id": self.episode_id, "task_id": task_id, "instruction": made["instruction"],
                "tools": tools}

    def ask(self, message: str) -> dict[str, Any]:
        r = self.http.post(f"/control/episodes/{self.episode_id}/messages", json={"message": message},
                           headers=self.control_headers)
        if r.status_code != 200:
            return {"ok": False, "reply": None, "error": str((r.json() if r.content else {}).get("error", r.text))}
        return {"ok": True, "reply": r.json()["reply"], "error": None}

    def step(self, name: str, args: Any) -> dict[str, Any]:
        r = self.http.post(self.mcp_url, json=self._rpc("tools/call", {"name": name, "arguments": args}),
                           headers=self._mcp_headers())
        return _mcp_result(self._checked(r))

    def verify(self, answer: Any) -> dict[str, Any]:
        return self._checked(self.http.post(f"/control/episodes/{self.episode_id}/verify", json={"answer": answer},
                                            headers=self.control_headers))

    def close_episode(self) -> None:
        if self.episode_id is not None:
            self.http.delete(f"/control/episodes/{self.episode_id}", headers=self.control_headers)
            self.episode_id = None

    def close(self) -> None:
        self.close_episode()


class _AsyncRemote(_RemoteBase):
    def __init__(self, url: str, token: str | None, http: Any = None) -> None:
        import httpx2

        super().__init__(url, token)
        self.http = http or httpx2.AsyncClient(base_url=self.url, timeout=60)
        self.own_http = http is None

    async def reset(self, task_id: str | None, seed: int | None) -> dict[str, Any]:
        await self.close_episode()
        if task_id is None:
            tasks = self._checked(await self.http.get("/control/tasks", headers=self.control_headers))
            task_id = draw_task([t["task_id"] for t in tasks], [t["task_id"] for t in tasks if t["curated"]], seed)
        made = self._checked(await self.http.post("/control/episodes", json={"task_id": task_id},
                                                  headers=self.control_headers), 201)
        self.episode_id, self.mcp_url = made["episode_id"], made["mcp_url"]
        init = await self.http.post(self.mcp_url, json=self._rpc("initialize", self._initialize_params()))
        self._checked(init)
        self.session = init.headers["mcp-session-id"]
        asks = bool(made.get("requester_topics"))  # its tool list has ask_requester: listed for this episode
        if not self.tools or asks:
            body = self._checked(await self.http.post(self.mcp_url, json=self._rpc("tools/list", {}),
                                                      headers=self._mcp_headers()))
            tools = self._tools(body)
            if not asks:
                self.tools = tools
        else:
            tools = self.tools
        return {"episode_id": self.episode_id, "task_id": task_id, "instruction": made["instruction"],
                "tools": tools}

    async def step(self, name: str, args: Any) -> dict[str, Any]:
        r = await self.http.post(self.mcp_url, json=self._rpc("tools/call", {"name": name, "arguments": args}),
                                 headers=self._mcp_headers())
        return _mcp_result(self._checked(r))

    async def verify(self, answer: Any) -> dict[str, Any]:
        return self._checked(await self.http.post(f"/control/episodes/{self.episode_id}/verify",
                                                  json={"answer": answer}, headers=self.control_headers))

    async def close_episode(self) -> None:
        if self.episode_id is not None:
            await self.http.delete(f"/control/episodes/{self.episode_id}", headers=self.control_headers)
            self.episode_id = None

    async def close(self) -> None:
        await self.close_episode()
        if self.own_http:
            await self.http.aclose()


# --- the public classes ----------------------------------------------------------------------------------

class WorldEnv:
    """One episode at a time of one world: in process (`world`) or against a server (`url`, `token`)."""

    def __init__(self, world: Any = None, *, url: str | None = None, token: str | None = None) -> None:
        if (world is None) == (url is None):
            raise ValueError("give a world (ID, bundle path or World) or a server url, not both")
        self._impl: Any = _Local(world) if world is not None else _Remote(url or "", token)
        self.verdict: dict[str, Any] | None = None
        self.task_id: str | None = None

    def reset(self, task_id: str | None = None, seed: int | None = None) -> dict[str, Any]:
        """A fresh episode: {"episode_id", "task_id", "instruction", "tools"} (tools: name, description,
        input_schema, annotations; `openai_tools(obs["tools"])` gives the chat-completions form)."""
        obs = self._impl.reset(task_id, seed)
        self.task_id, self.verdict = obs["task_id"], None
        return obs

    def step(self, tool_call: Any) -> dict[str, Any]:
        """One tool call: {"ok", "result", "error"}; a failed call changes nothing."""
        if self.task_id is None:
            raise RuntimeError("call reset() first")
        return self._impl.step(*parse_tool_call(tool_call))

    def ask(self, message: str) -> dict[str, Any]:
        """The trainer's channel to the task's requester: the agent's words, and {"ok", "reply", "error"}.
        Answered from the task's hidden facts (requester.py); kept in the trace as an ask_requester call."""
        if self.task_id is None:
            raise RuntimeError("call reset() first")
        return self._impl.ask(message)

    def verify(self, answer: Any = None) -> float:
        """The episode's reward from the world's verifier (1.0 or 0.0); self.verdict has the details."""
        if self.task_id is None:
            raise RuntimeError("call reset() first")
        self.verdict = self._impl.verify(answer)
        return float(self.verdict["reward"])

    def close(self) -> None:
        self._impl.close()

    def __enter__(self) -> WorldEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncWorldEnv:
    """WorldEnv with `await`: against a server the calls are asynchronous HTTP; in process they run in a thread."""

    def __init__(self, world: Any = None, *, url: str | None = None, token: str | None = None,
                 http: Any = None) -> None:
        if (world is None) == (url is None):
            raise ValueError("give a world (ID, bundle path or World) or a server url, not both")
        self._remote = url is not None
        self._impl: Any = _AsyncRemote(url or "", token, http) if self._remote else _Local(world)
        self._lock = asyncio.Lock()
        self.verdict: dict[str, Any] | None = None
        self.task_id: str | None = None

    async def _run(self, method: str, *args: Any) -> Any:
        fn = getattr(self._impl, method)
        if self._remote:
            return await fn(*args)
        async with self._lock:
            return await asyncio.to_thread(fn, *args)

    async def reset(self, task_id: str | None = None, seed: int | None = None) -> dict[str, Any]:
        obs = await self._run("reset", task_id, seed)
        self.task_id, self.verdict = obs["task_id"], None
        return obs

    async def step(self, tool_call: Any) -> dict[str, Any]:
        if self.task_id is None:
            raise RuntimeError("call reset() first")
        return await self._run("step", *parse_tool_call(tool_call))

    async def verify(self, answer: Any = None) -> float:
        if self.task_id is None:
            raise RuntimeError("call reset() first")
        self.verdict = await self._run("verify", answer)
        return float(self.verdict["reward"])

    async def close(self) -> None:
        await self._run("close")


class EnvBatch:
    """Many episodes at once: reset, step and verify take and return one item per episode.

    Against a server the episodes share one HTTP connection pool and run concurrently; in process
    they share the world (loaded once) and its confined worker.
    """

    def __init__(self, size: int, world: Any = None, *, url: str | None = None, token: str | None = None) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.http: Any = None
        if url is not None:
            import httpx2

            self.http = httpx2.AsyncClient(base_url=url.rstrip("/"), timeout=120,
                                           limits=httpx2.Limits(max_connections=min(size, 256)))
            self.envs = [AsyncWorldEnv(url=url, token=token, http=self.http) for _ in range(size)]
        else:
            first = AsyncWorldEnv(world)
            shared = first._impl.world  # one loaded world for every episode
            self.envs = [first, *(AsyncWorldEnv(shared) for _ in range(size - 1))]

    async def reset(self, task_ids: list[str | None] | None = None,
                    seeds: list[int | None] | None = None) -> list[dict[str, Any]]:
        n = len(self.envs)
        task_ids = task_ids or [None] * n
        seeds = seeds or list(range(n))
        return list(await asyncio.gather(*(e.reset(t, s) for e, t, s in zip(self.envs, task_ids, seeds, strict=True))))

    async def step(self, tool_calls: list[Any]) -> list[dict[str, Any] | None]:
        """One call per episode (None: that episode takes no step this round)."""
        async def one(env: AsyncWorldEnv, call: Any) -> dict[str, Any] | None:
            return None if call is None else await env.step(call)

        return list(await asyncio.gather(*(one(e, c) for e, c in zip(self.envs, tool_calls, strict=True))))

    async def verify(self, answers: list[Any] | None = None) -> list[float]:
        answers = answers or [None] * len(self.envs)
        return list(await asyncio.gather(*(e.verify(a) for e, a in zip(self.envs, answers, strict=True))))

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.envs))
        if self.http is not None:
            await self.http.aclose()

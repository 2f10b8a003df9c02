"""The verifiers (v1) adapter, run by verifiers itself: its env loader finds the plugin, its null harness
runs the chat program in a subprocess runtime, its interception relays the model's turns, and the world's
verifier grades each episode. The model is a scripted chat-completions server on loopback that streams
(SSE) the next reply of its script: no model, no network."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

WORLD = "insurance-claims.regional--v001"


class StreamingScript:
    """Answers each chat-completions request with the next reply of its script, streamed as SSE."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                script.requests.append(body)
                text = script.replies.pop(0) if script.replies else "(the script has ended)"
                base = {"id": f"c{len(script.requests)}", "object": "chat.completion.chunk", "created": 0,
                        "model": body.get("model", "scripted")}
                chunks = [
                    {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                          "finish_reason": None}]},
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
                ]
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def vf_env(worlds_dir: Any) -> Iterator[Any]:
    import verifiers.v1 as vf
    from verifiers.v1.harnesses.null import NullHarnessConfig
    from verifiers.v1.runtimes import SubprocessConfig

    from worldfactory.adapters.verifiers_env import TASKSET_ID, WorldEnvConfig, WorldTasksetConfig

    # verifiers' runtime runs its chat program with `uv` from PATH: the one the trainers extra installed.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

    config = WorldEnvConfig(taskset=WorldTasksetConfig(id=TASKSET_ID, world=str(worlds_dir / WORLD)),
                            player=vf.AgentConfig(runtime=SubprocessConfig(), harness=NullHarnessConfig(id="null")))
    yield vf.load_environment(config)


def test_verifiers_runs_episodes_graded_by_the_world(vf_env: Any) -> None:
    from verifiers.v1.clients.client import ModelContext
    from verifiers.v1.configs.client import EvalClientConfig

    from worldfactory.adapters.verifiers_env import WorldVerifiersEnv

    assert isinstance(vf_env, WorldVerifiersEnv)
    world = vf_env.taskset.world
    tasks = list(vf_env.taskset)
    curated = [json.loads(line)["task_id"] for line in world.files["curated_tasks.jsonl"].decode().splitlines()]
    assert sorted(t.data.task_id for t in tasks) == sorted(curated)
    # A task that changes state and asks no question: doing nothing fails it.
    task = next(t for t in tasks if world.task(t.data.task_id).answer is None
                and world.episode(t.data.task_id).verify(None).reward == 0.0)
    oracle = world.task(task.data.task_id).oracle
    # The whole plan in one reply (the env runs every call of a reply, in order): each turn of the null
    # harness costs a model round trip through verifiers' interception, so fewer turns keep the test short.
    solve = ["".join(f"<tool_call>{json.dumps({'name': c.tool, 'arguments': c.args})}</tool_call>" for c in oracle)]
    os.environ.setdefault("WF_SCRIPTED_KEY", "not-a-key")
    with StreamingScript([*solve, "Done.", "I will not do that."]) as base_url:
        ctx = ModelContext(model="scripted", client=EvalClientConfig(base_url=base_url, api_key_var="WF_SCRIPTED_KEY"))

        async def play() -> list[Any]:
            async with vf_env.serving():
                return [await vf_env.run_episode(task, ctx), await vf_env.run_episode(task, ctx)]

        start = time.perf_counter()
        solved, idle = asyncio.run(play())
        seconds = time.perf_counter() - start
    for episode in (solved, idle):
        assert episode.errors == [] and len(episode.traces) == 1, episode.errors
    good, bad = solved.traces[0], idle.traces[0]
    assert good.errors == [], good.errors
    assert good.rewards["world_verifier"].score == 1.0 and good.metrics["tool_calls"] == len(oracle)
    # The second episode starts from the seed again (the first one's writes are not in it) and fails.
    assert bad.rewards["world_verifier"].score == 0.0 and bad.metrics["tool_calls"] == 0
    assert bad.info["worldfactory"]["verdict"]["mismatches"]
    print(f"verifiers: 2 episodes in {seconds:.1f} s ({len(oracle)} tool calls), rewards 1.0 and 0.0")

"""The verifiers (v1) adapter, run by verifiers itself: its env loader finds the plugin, its null harness
runs the chat program in a subprocess runtime, its interception relays the model's turns, and the world's
verifier grades each episode. The model is a scripted chat-completions server on loopback that streams
(SSE) the next reply of its script: no model, no network."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
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


def vf_eval(args: list[str], base_url: str, out: Path, data: Path) -> subprocess.CompletedProcess[str]:
    """`vf-eval worldfactory-verifiers ...` as a verifiers user runs it: its own process, from a folder
    that is not the checkout (the plugin must be installed), models on `base_url`."""
    env = dict(os.environ, WORLDFACTORY_DATA=str(data), WF_SCRIPTED_KEY="not-a-key",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(Path(sys.executable).parent / "vf-eval"), "worldfactory-verifiers", *args, "-m", "scripted",
           "--client.base-url", base_url, "--client.api-key-var", "WF_SCRIPTED_KEY", "--no-push", "--no-rich",
           "-c", "1", "-o", str(out), "--run.dir", "run", "--clean"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=out.parent)


def test_vf_eval_command_line_runs_the_world_with_families_and_rollouts(worlds_dir: Path, worlds: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    world = worlds[WORLD]
    family = "lookup_act"
    curated = sorted(json.loads(line)["task_id"] for line in world.files["curated_tasks.jsonl"].decode().splitlines())
    picked = [t for t in curated if world.task(t).family == family]
    task = picked[0]  # -n 1 keeps the first task the families filter leaves
    assert world.episode(task).verify(None).reward == 0.0  # doing nothing fails it
    solve = "".join(f"<tool_call>{json.dumps({'name': c.tool, 'arguments': c.args})}</tool_call>"
                    for c in world.task(task).oracle)
    out = tmp_path / "outputs"
    out.mkdir()
    # -r 2 (two rollouts of the task, one at a time): the first solves it, the second does nothing
    with StreamingScript([solve, "Done.", "I will not do that."]) as base_url:
        done = vf_eval(["--env.taskset.world", WORLD, "--env.taskset.families", json.dumps([family]), "-n", "1",
                        "-r", "2"], base_url, out, worlds_dir.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    traces = [json.loads(line) for line in (out / "run" / "traces.jsonl").read_text().splitlines()]
    tasks = [t["traces"][0]["info"]["worldfactory"]["task_id"] for t in traces]
    scores = [t["traces"][0]["rewards"]["world_verifier"]["score"] for t in traces]
    assert tasks == [task, task] and scores == [1.0, 0.0], (tasks, scores)
    # a family the world does not have is named, with the ones it has
    bad = vf_eval(["--env.taskset.world", WORLD, "--env.taskset.families", '["nosuch"]'], "http://127.0.0.1:9/v1",
                  out, worlds_dir.parent)
    assert bad.returncode != 0 and "['nosuch'] not in" in bad.stderr and family in bad.stderr


def test_vf_eval_help_and_a_failing_model_fail_loudly(worlds_dir: Path, tmp_path: Path) -> None:
    from tests.llm_server import LLMServer, ScriptedModel

    out = tmp_path / "outputs"
    out.mkdir()
    helped = vf_eval(["--env.taskset.world", WORLD, "--help"], "http://127.0.0.1:9/v1", out, worlds_dir.parent)
    assert helped.returncode == 0 and "--env.taskset.families" in helped.stdout, helped.stderr[-2000:]
    nothing = vf_eval(["-n", "1"], "http://127.0.0.1:9/v1", out, worlds_dir.parent)
    assert nothing.returncode != 0 and "--env.taskset.world WORLD" in nothing.stderr
    # a real HTTP server that answers 500: the run fails with the provider's error, not a score of 0.0
    model = ScriptedModel({}, mode="error500")
    with LLMServer(model) as base_url:
        failed = vf_eval(["--env.taskset.world", WORLD, "-n", "1"], base_url, out, worlds_dir.parent)
    assert failed.returncode == 1, (failed.returncode, failed.stdout[-2000:])
    assert "ModelCallFailed" in failed.stderr and "the scripted server is down" in failed.stderr
    assert model.requests >= 1

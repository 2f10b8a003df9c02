"""The requester (issue 33, item 4): tasks that leave a fact out, and the agent asks for it.

The ask family's tasks carry hidden facts by topic; an episode of such a task offers one more tool,
`ask_requester(topic)` with the topics as an enum, on every surface (in process, MCP in memory, stdio,
streamable HTTP) and only there; trainers reach the same requester through the control plane's
`/messages` and `WorldEnv.ask`. Acting on a guess (the mutant `guess`, the policy `never_asks`) must fail.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import PYTHON
from tests.llm_server import LLMServer, ScriptedReplies
from tests.test_serving import TOKEN, Server
from worldfactory.env import WorldEnv
from worldfactory.generate.careless import guess_plan
from worldfactory.generate.validity import check_task
from worldfactory.policies.base import run_policy
from worldfactory.requester import ASK_TOOL, ModelRequester, ScriptedRequester
from worldfactory.runtime.mcp_server import build_server
from worldfactory.runtime.world import World
from worldfactory.seeds import stage_rng
from worldfactory.spec import Task

WORLD = "insurance-claims.regional--v001"


@pytest.fixture(scope="module")
def world(worlds: dict[str, World]) -> World:
    return worlds[WORLD]


def _ask_tasks(world: World) -> list[Task]:
    return [t for t in world.tasks.values() if t.family == "ask"]


def _plain_task(world: World) -> Task:
    return next(t for t in world.tasks.values() if not t.requester)


def test_every_example_world_has_ask_tasks_that_need_asking(worlds: dict[str, World]) -> None:
    for world in worlds.values():
        tasks = _ask_tasks(world)
        assert len(tasks) >= 4, world.world_id
        for task in tasks:
            asks = [c for c in task.oracle if c.tool == ASK_TOOL]
            assert asks and all(c.args["topic"] in task.requester for c in asks)
            for fact in task.requester.values():
                assert fact.rstrip(".").split()[-1] not in task.instruction  # the fact is not in the instruction
            assert task.declined_calls and all(c not in task.oracle for c in task.declined_calls)


def test_scripted_requester_answers_its_topics_and_declines_the_rest(world: World) -> None:
    task = _ask_tasks(world)[0]
    topic, fact = next(iter(task.requester.items()))
    with world.episode(task.task_id) as ep:
        step = ep.call(ASK_TOOL, {"topic": topic})
        assert step.ok and step.result == {"topic": topic, "answer": fact}
        bad = ep.call(ASK_TOOL, {"topic": "the_weather"})
        assert not bad.ok and topic in (bad.error or "")
        assert not ep.call(ASK_TOOL, {"topic": topic, "extra": 1}).ok
        said = ep.ask(f"Could you tell me the {topic.replace('_', ' ')}?")
        assert said.ok and fact in said.result["answer"]  # type: ignore[index]
        off = ep.ask("What is the capital of France?")
        assert off.ok and "can't help" in off.result["answer"]  # type: ignore[index]
        assert ep.written == set()  # asking changes nothing
    with world.episode(_plain_task(world).task_id) as ep:  # no requester: no such tool
        assert "unknown tool" in (ep.call(ASK_TOOL, {"topic": topic}).error or "")
    assert ScriptedRequester(task).answer("nope").startswith("I can't help")


def test_scripted_requester_understands_the_way_people_ask() -> None:
    """Found blind: "Should I review CLM-000169 or CLM-000251?", "Which of the two claims do you mean?" (topic
    which_claim) and "What figure did the parties agree on?" (settlement_amount) were declined, naming no word
    of the topic as spelled. Plurals, a few words per kind of topic and a record's code now reach the fact;
    questions about anything else are still declined."""
    facts = {"which_claim": "I mean claim CLM-000251.", "settlement_amount": "The amount: $12,500.00.",
             "reason": "The reason the ticket is escalated: deadline at risk (pass it as \"deadline_at_risk\").",
             "pay_method": "The way the client pays: wire.", "paid_on": "The date: 2026-03-02."}
    asked = {
        "which_claim": ["Should I review CLM-000169 or CLM-000251?", "Which of the two claims do you mean?",
                        "Is it the first one?"],
        "settlement_amount": ["What figure did the parties agree on?", "How much was it?", "What was the sum?",
                              "What totals did you settle on?"],
        "reason": ["Why is it being escalated?", "What are the reasons?"],
        "pay_method": ["How will they pay?", "Which method?"],
        "paid_on": ["When was it paid?", "What day?"],
    }
    off = ["What is the capital of France?", "Thanks so much!", "Can you do it yourself?", "Is it raining there?"]
    for topic, messages in asked.items():
        requester = ScriptedRequester(Task(task_id="ask-001", family="ask", instruction="x", oracle=[],
                                           target="claims", requester={topic: facts[topic]}))
        for message in messages:
            assert facts[topic] in requester.reply(message), (topic, message)
        for message in off:
            assert requester.reply(message).startswith("I can't help"), (topic, message)


def test_guessing_fails_and_asking_passes(world: World) -> None:
    """The oracle passes, doing nothing fails, the guess mutant is caught, never_asks fails every ask task."""
    rng = stage_rng(world.brief.generation_seed, "validity")
    for task in _ask_tasks(world):
        report = check_task(world, task, rng)
        assert report.oracle_passes and report.null_fails and not report.problems, report.problems
        guess = [m for m in report.mutants if m.kind == "guess"]
        assert len(guess) == 1 and not guess[0].passed and not guess[0].equivalent
        assert not run_policy(world, task.task_id, "never_asks").verdict.passed
        assert run_policy(world, task.task_id, "oracle").verdict.passed
    # Planted: a "guess" that is in fact the right action (the oracle's own step) is equivalent, so the
    # check could tell a family whose guesses were not wrong by construction.
    task = _ask_tasks(world)[0]
    step = next(c for c in reversed(task.oracle) if c.tool != ASK_TOOL)
    right = task.model_copy(update={"declined_calls": [step]})
    plan = guess_plan(right)
    assert plan is not None
    with world.episode(task.task_id) as ep:
        for call in plan:
            ep.call(call.tool, call.args)
        assert ep.verify(task.answer).passed


async def _tools_and_answer(target: Any, topic: str) -> tuple[list[dict[str, Any]], str]:
    async with Client(target) as client:
        tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools]
        r = await client.call_tool(ASK_TOOL, {"topic": topic})
        return tools, r.content[0].text  # type: ignore[union-attr]


def _check_listing(world: World, task: Task, tools: list[dict[str, Any]]) -> None:
    names = [t["name"] for t in tools]
    assert names == [*(t["name"] for t in world.tool_manifest), ASK_TOOL]
    ask = tools[-1]
    assert ask["inputSchema"]["properties"]["topic"]["enum"] == sorted(task.requester)
    assert ask["annotations"]["readOnlyHint"] is True


def test_mcp_in_memory_and_stdio_list_ask_only_for_its_tasks(world: World, worlds_dir: Path) -> None:
    task = _ask_tasks(world)[0]
    topic, fact = next(iter(task.requester.items()))
    tools, text = anyio.run(_tools_and_answer, build_server(world, world.episode(task.task_id)), topic)
    _check_listing(world, task, tools)
    assert fact in text
    plain = anyio.run(_tools_and_answer, build_server(world, world.episode(_plain_task(world).task_id)), topic)
    assert ASK_TOOL not in [t["name"] for t in plain[0]] and "unknown tool" in plain[1]
    params = StdioServerParameters(command=PYTHON, args=["-m", "worldfactory.cli", "serve", str(worlds_dir / WORLD),
                                                         "--task", task.task_id],
                                   env={"PATH": os.environ.get("PATH", "")})
    tools, text = anyio.run(_tools_and_answer, params, topic)
    _check_listing(world, task, tools)
    assert fact in text


def test_http_lists_ask_and_the_control_plane_relays_messages(world: World) -> None:
    task = _ask_tasks(world)[0]
    topic, fact = next(iter(task.requester.items()))
    auth = {"authorization": f"Bearer {TOKEN}"}
    with Server(world) as server:
        tools, text = anyio.run(_tools_and_answer, server.url + "/mcp", topic)  # free-form: no requester
        assert ASK_TOOL not in [t["name"] for t in tools]
        with httpx2.Client(base_url=server.url, timeout=30) as http:
            made = http.post("/control/episodes", json={"task_id": task.task_id}, headers=auth).json()
            assert made["requester_topics"] == sorted(task.requester)
            tools, text = anyio.run(_tools_and_answer, server.url + made["mcp_url"], topic)
            _check_listing(world, task, tools)
            assert fact in text
            url = f"/control/episodes/{made['episode_id']}/messages"
            r = http.post(url, json={"message": f"which {topic.replace('_', ' ')} do you mean?"}, headers=auth)
            assert r.status_code == 200 and fact in r.json()["reply"]
            assert http.post(url, json={"message": "hi"}).status_code == 401  # the token is required
            assert http.post(url, json={"message": ""}, headers=auth).status_code == 400
            trace = http.get(f"/control/episodes/{made['episode_id']}/trace", headers=auth).text
            assert trace.count(ASK_TOOL) == 2  # the agent's ask over MCP and the trainer's message
            plain = http.post("/control/episodes", json={"task_id": _plain_task(world).task_id}, headers=auth).json()
            assert plain["requester_topics"] == []
            r = http.post(f"/control/episodes/{plain['episode_id']}/messages", json={"message": "hi"}, headers=auth)
            assert r.status_code == 409


def test_world_env_asks_in_process_and_remote(world: World) -> None:
    task = _ask_tasks(world)[0]
    topic, fact = next(iter(task.requester.items()))
    with Server(world) as server:
        for env in (WorldEnv(world), WorldEnv(url=server.url, token=TOKEN)):
            with env:
                obs = env.reset(task_id=task.task_id)
                assert ASK_TOOL in [t["name"] for t in obs["tools"]]
                out = env.ask(f"What is the {topic.replace('_', ' ')}?")
                assert out["ok"] and fact in out["reply"]
                for call in task.oracle:
                    assert env.step({"name": call.tool, "arguments": call.args})["ok"]
                assert env.verify(task.answer) == 1.0
                obs = env.reset(task_id=_plain_task(world).task_id)
                assert ASK_TOOL not in [t["name"] for t in obs["tools"]]
                assert env.ask("anything?")["ok"] is False


def test_model_requester_behind_the_same_interface(world: World) -> None:
    """A model-backed requester on a real loopback HTTP server: it is told the facts, keeps the dialogue,
    and the episode's ask tool answers with its words; a topic it does not hold is declined without a call."""
    task = _ask_tasks(world)[0]
    topic, fact = next(iter(task.requester.items()))
    model = ScriptedReplies(["It is the second one: " + fact, "Nothing else, thanks."])
    with LLMServer(model) as url:
        requester = ModelRequester(task, base_url=url, model="scripted")
        with world.episode(task.task_id) as ep:
            ep.requester = requester
            step = ep.call(ASK_TOOL, {"topic": topic})
            assert step.ok and fact in step.result["answer"]  # type: ignore[index]
            assert ep.ask("Anything else?").result == {"answer": "Nothing else, thanks."}
            assert not ep.call(ASK_TOOL, {"topic": "nope"}).ok  # the enum still holds
        requester.close()
    assert model.requests == 2
    system = model.bodies[0]["messages"][0]["content"]
    assert fact in system
    assert [m["role"] for m in model.bodies[1]["messages"]] == ["system", "user", "assistant", "user"]


def test_model_requester_unreachable_changes_nothing(world: World) -> None:
    task = _ask_tasks(world)[0]
    topic = next(iter(task.requester))
    with LLMServer(ScriptedReplies([500, 500, 500])) as url:
        requester = ModelRequester(task, base_url=url, model="scripted")
        with world.episode(task.task_id) as ep:
            ep.requester = requester
            step = ep.call(ASK_TOOL, {"topic": topic})
            assert not step.ok and "ask_requester failed" in (step.error or "")
        requester.close()

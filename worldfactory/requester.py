"""The requester: the person who asked for the task, reachable by the agent while it works.

Some tasks leave out a fact the requester knows (which of two records, the amount, the method). The
task carries those facts by topic (`Task.requester`); the episode exposes them to the agent as one
extra tool, `ask_requester(topic)`, whose topics are an enum of what this requester can answer, and
to trainers as a message channel (the control plane's `/messages`, `WorldEnv.ask`).

`ScriptedRequester` answers deterministically from the hidden facts and declines anything else, so
a rollout replays byte for byte. `ModelRequester` puts the same facts behind an OpenAI-compatible
chat model for free-form dialogue; it is never used in a build and never grades anything (the
verifier grades the end state, whatever was said).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from worldfactory.spec import Task

ASK_TOOL = "ask_requester"
MESSAGE_CHARS = 2000  # a trainer's message to the requester is at most this long
DECLINE = "I can't help with that; I can only tell you about: {topics}."


def topics(task: Task | None) -> list[str]:
    """The topics the task's requester can answer, sorted (the tool's enum)."""
    return sorted(task.requester) if task is not None and task.requester else []


def ask_tool_entry(task: Task) -> dict[str, Any]:
    """The ask tool as tools.json would declare it, for the episodes of this task only."""
    return {
        "name": ASK_TOOL,
        "description": ("Ask the person who requested this task for a fact the instruction leaves out. "
                        "Give one topic; they answer it or say they cannot. Changes nothing."),
        "input_schema": {
            "type": "object",
            "properties": {"topic": {"type": "string", "enum": topics(task),
                                     "description": "what to ask the requester about"}},
            "required": ["topic"],
            "additionalProperties": False,
        },
        "annotations": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True},
        "provenance": "requester",
        "kind": "ask",
    }


def argument_error(task: Task, args: Any) -> str | None:
    """What is wrong with an ask call's arguments, worded as the other tools word theirs, or None.
    A call gives a topic (the agent's tool) or a free-form message (the trainer's channel), not both."""
    known = topics(task)
    if not isinstance(args, dict):
        return f"invalid arguments for {ASK_TOOL}: expected a JSON object"
    extra = sorted(set(args) - {"topic", "message"})
    if extra:
        return f"invalid arguments for {ASK_TOOL}: unknown parameter {extra[0]!r}; give only 'topic'"
    if "message" in args and "topic" not in args:
        message = args["message"]
        if not isinstance(message, str) or not message.strip() or len(message) > MESSAGE_CHARS:
            return (f"invalid arguments for {ASK_TOOL}: message: a non-empty string of at most {MESSAGE_CHARS} "
                    f"characters")
        return None
    topic = args.get("topic")
    if not isinstance(topic, str) or "message" in args:
        return f"invalid arguments for {ASK_TOOL}: topic: a string is required, one of {known}"
    if topic not in known:
        return f"invalid arguments for {ASK_TOOL}: topic: {topic[:40]!r} is not one of {known}"
    return None


def ask(requester: Requester, args: dict[str, Any]) -> dict[str, Any]:
    """An ask call's result: the requester's answer to the topic or the message (arguments already checked)."""
    if "topic" in args:
        return {"topic": args["topic"], "answer": requester.answer(args["topic"])}
    return {"answer": requester.reply(args["message"])}


class Requester(Protocol):
    """Answers the agent: by topic (the tool) or by a free-form message (the trainer's channel)."""

    def answer(self, topic: str) -> str: ...

    def reply(self, message: str) -> str: ...


class ScriptedRequester:
    """Answers from the task's hidden facts; declines any topic it does not hold. Deterministic."""

    def __init__(self, task: Task) -> None:
        self.facts = dict(task.requester)

    def answer(self, topic: str) -> str:
        fact = self.facts.get(topic)
        return fact if fact is not None else DECLINE.format(topics=", ".join(sorted(self.facts)) or "nothing")

    def reply(self, message: str) -> str:
        """A free-form message: the facts whose topic it asks about (``asks_about``), else a decline."""
        hits = [t for t in sorted(self.facts) if asks_about(message, t, self.facts[t])]
        if not hits:
            return self.answer("")
        return " ".join(self.facts[t] for t in hits)


# How people ask about each kind of topic (found blind: "What figure did the parties agree on?" and "Which of
# the two claims do you mean?" were declined, naming no word of settlement_amount or which_claim).
ASKS = {
    "which": ("which", "or", "mean", "one", "either"),
    "amount": ("amount", "figure", "sum", "how much", "how many", "total", "value", "number"),
    "reason": ("why", "reason", "because", "cause"),
    "date": ("when", "date", "day"),
    "way": ("how", "method", "way"),
}
KIND_WORDS = {  # a topic's words that say its kind
    "amount": ("amount", "total", "price", "cost", "fee", "sum", "hours", "quantity", "rate", "pay", "deposit"),
    "reason": ("reason", "note", "why"),
    "date": ("date", "on", "day", "at"),
    "way": ("method", "channel", "way", "how"),
}
CODE = re.compile(r"\b[A-Z]{2,}-\d+\b")  # a record's code, as a label says it: CLM-000251


def _stem(word: str) -> str:
    """A word without its plural ending, so "claims" asks about a claim."""
    if len(word) < 4 or not word.endswith("s") or word.endswith("ss"):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("ses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    return word[:-1]


def topic_kind(topic: str) -> str | None:
    """What a topic asks for: which record, an amount, a reason, a date or a way; None for another."""
    words = topic.split("_")
    if words[0] == "which":
        return "which"
    for word in reversed(words):  # the last word says it first: pay_method is a way, settlement_amount an amount
        kind = next((kind for kind, names in KIND_WORDS.items() if word in names), None)
        if kind is not None:
            return kind
    return None


def asks_about(message: str, topic: str, fact: str = "") -> bool:
    """Whether a free-form message asks about the topic, deterministically: a word of the topic in either
    number ("claims" for which_claim), a word people use for its kind ("figure" for an amount, "why" for a
    reason), or, for which record, a record code the way the records are named (CLM-000169)."""
    text = message.lower()
    said = {_stem(w) for w in re.findall(r"[a-z]+", text)}
    own = {_stem(w) for w in topic.split("_") if len(w) > 3 and w != "which"}
    if said & own:
        return True
    kind = topic_kind(topic)
    if kind is None:
        return False
    phrases = ASKS[kind]
    if any((" " in p and re.search(rf"\b{p}\b", text)) or (" " not in p and _stem(p) in said) for p in phrases):
        return True
    prefixes = {c.split("-")[0] for c in CODE.findall(fact)}
    return kind == "which" and any(c.split("-")[0] in prefixes or not prefixes for c in CODE.findall(message))


class ModelRequester:
    """The same facts behind an OpenAI-compatible chat model, for free-form dialogue (not for grading).

    The model is told the facts and told to reveal only what it is asked; the conversation so far is
    kept, so a trainer can hold a dialogue. Topic questions go through `reply` as a sentence."""

    def __init__(self, task: Task, base_url: str, model: str, api_key: str = "unused", timeout_s: float = 30.0) -> None:
        import openai

        self.facts = dict(task.requester)
        self.model = model
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=1)
        facts = "\n".join(f"- {topic.replace('_', ' ')}: {fact}" for topic, fact in sorted(self.facts.items()))
        self.messages: list[dict[str, str]] = [{"role": "system", "content": (
            "You asked a colleague to do a task for you. They may ask you questions. Answer only what they ask, "
            "briefly, using these facts; if they ask anything else, say you cannot help with that.\n" + facts)}]

    def answer(self, topic: str) -> str:
        if topic not in self.facts:
            return DECLINE.format(topics=", ".join(sorted(self.facts)) or "nothing")
        return self.reply(f"What is the {topic.replace('_', ' ')}?")

    def reply(self, message: str) -> str:
        self.messages.append({"role": "user", "content": message})
        out = self._client.chat.completions.create(model=self.model, messages=self.messages)  # type: ignore[arg-type]
        text = (out.choices[0].message.content if out.choices else None) or ""
        self.messages.append({"role": "assistant", "content": text})
        return text

    def close(self) -> None:
        self._client.close()

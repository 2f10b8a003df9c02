"""Scripted policies with one known weakness each: the failure taxonomy must name it as their top cause.

Each is the oracle with one habit, which it acts on in half of its episodes: one draw from the
episode's seeded stream decides (`habit`), so an episode is the same for the same seed and a task
that exercises the weakness passes some of its k episodes and fails others (the policy's pass band
is not empty). Where the habit is off it plays the oracle:

- `rule_blind` never reads a business rule: where a rule picks between actions it takes its table's
  first transition, and where a rule forbids the asked action it does it anyway;
- `first_write` stops after its first write and answers nothing;
- `name_confuser` looks records up by the first word of their name and acts on the first record that
  matches other than the one meant (Zenith Logistics for Zenith Textiles): every later call that names
  the meant record by its id, under any argument that refers to its table, names that one instead.
"""

from __future__ import annotations

import random
import re
from typing import Any

from worldfactory.policies.hard import id_params
from worldfactory.runtime.episode import Episode
from worldfactory.spec import Task

RULE_TABLE = "business_rules"
NAME_KEYS = ("name", "full_name", "title")


HABIT_SHARE = 0.5  # the share of episodes in which a weak policy acts on its habit


def habit(rng: random.Random) -> bool:
    """Whether this episode acts on the policy's habit: the episode's first draw, so it is seeded."""
    return rng.random() < HABIT_SHARE


def _oracle(task: Task, episode: Episode) -> Any:
    for call in task.oracle:
        episode.call(call.tool, call.args)
    return task.answer


def _spec(episode: Episode, tool: str) -> dict[str, Any]:
    return episode.world.tools_by_name.get(tool, {})  # ask_requester is the episode's: no table, a read


def _writes(episode: Episode, tool: str) -> bool:
    return not (_spec(episode, tool).get("annotations") or {}).get("read_only_hint", False)


def first_write_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """The oracle until its first write; then it stops, with no answer."""
    if not habit(rng):
        return _oracle(task, episode)
    for call in task.oracle:
        episode.call(call.tool, call.args)
        if _writes(episode, call.tool):
            return None
    return task.answer


def rule_blind_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """The oracle without its business-rule reads, taking the permissive action where a rule decides."""
    manifest = episode.world.tool_manifest
    if not habit(rng) or not any(_spec(episode, c.tool).get("table") == RULE_TABLE for c in task.oracle):
        return _oracle(task, episode)
    last_get: tuple[str, dict[str, Any]] | None = None
    wrote = False
    for call in task.oracle:
        spec = _spec(episode, call.tool)
        if spec.get("table") == RULE_TABLE:
            continue
        tool = call.tool
        if spec.get("kind") == "transition":
            params = set(spec["input_schema"].get("properties", {}))
            tool = next(t["name"] for t in manifest if t.get("table") == spec.get("table")
                        and t.get("kind") == "transition" and set(t["input_schema"].get("properties", {})) == params)
        episode.call(tool, call.args)
        wrote = wrote or _writes(episode, tool)
        if spec.get("kind") == "get":
            last_get = (spec["table"], call.args)
    if not wrote and last_get is not None:  # a rule forbids what was asked: it does it all the same
        words = set(re.findall(r"[a-z]+", task.instruction.lower()))
        table, args = last_get
        act = next((t["name"] for t in manifest if t.get("table") == table and t.get("kind") == "transition"
                    and t["name"].split("_")[0] in words), None)
        if act is not None:
            episode.call(act, args)
            return None
    return task.answer


def _id_args(episode: Episode, table: str) -> set[str]:
    """The argument names that hold an id of this table: its get tool's id, and every column or step parameter
    that refers to it."""
    get_id = id_params(episode).get(table)  # its get tool's id parameter
    names = {get_id} if get_id else set()
    spec = episode.world.spec
    for t in spec.tables:
        params = [p for tr in t.workflow.transitions for p in tr.params] if t.workflow else []
        names |= {x.name for x in [*t.columns, *params] if (spec.anchor if x.ref == "$anchor" else x.ref) == table}
    return names


def name_confuser_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """The oracle, except that a search by a name of several words searches by its first word and takes the
    first record found that is not the one meant: every later call that names the meant record by its id names
    that one instead, and a search through it (that record's orders) takes what it finds in the same way, or,
    finding nothing there to act on, stops without an answer."""
    if not habit(rng):
        return _oracle(task, episode)
    swap: dict[tuple[str, Any], Any] = {}  # (argument name, the meant record's id) -> the id it uses instead
    for i, call in enumerate(task.oracle):
        spec = _spec(episode, call.tool)
        args = {k: swap.get((k, v), v) if isinstance(v, int) else v for k, v in call.args.items()}
        key = next((k for k in NAME_KEYS if isinstance(args.get(k), str) and len(args[k].split()) > 1), None)
        if spec.get("kind") != "search" or (key is None and args == call.args):
            episode.call(call.tool, args)
            continue
        step = episode.call(call.tool, {**args, key: args[key].split()[0]} if key else args)
        found = [r.get("id") for r in (step.result or {}).get("results") or []]
        names = _id_args(episode, str(spec.get("table", "")))
        meant = next((v for c in task.oracle[i + 1:] for k, v in c.args.items() if k in names), None)
        wrong = next((r for r in found if r != meant), None)
        if meant is not None and wrong is not None:
            swap.update({(n, meant): wrong for n in names})
        elif meant is not None and key is None and not found and any(_writes(episode, c.tool)
                                                                        for c in task.oracle[i + 1:]):
            return None  # the other record has nothing of the kind: nothing found to act on, so it stops
    return task.answer


WEAK = {"rule_blind": rule_blind_policy, "first_write": first_write_policy, "name_confuser": name_confuser_policy}

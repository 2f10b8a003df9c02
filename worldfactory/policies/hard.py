"""Scripted policies for the hard tier, each with the one habit its family punishes (deterministic).

- `first_hit` is the oracle, except that where a search finds several records it acts on the first one
  it lists: it passes where the search finds one record, and fails a discover task whenever the record
  meant is not the first hit (the newer twin, listed second);
- `refusal_only` follows the tools, not the handbook: it never reads the handbook and takes the step the
  instruction asks for unless a tool refuses it. Where the handbook forbids what the tools allow (a task's
  ``trap``), it does what the tools allow; elsewhere it plays the oracle without the handbook reads.
"""

from __future__ import annotations

import random
from typing import Any

from worldfactory.runtime.episode import Episode
from worldfactory.spec import Task

HANDBOOK_TOOLS = ("search_handbook_sections", "get_handbook_section")


def id_params(episode: Episode) -> dict[str, str]:
    """Per table, the id parameter its get tool takes (claim_id for claims)."""
    out: dict[str, str] = {}
    for tool in episode.world.tool_manifest:
        if tool.get("kind") == "get":
            required = tool["input_schema"].get("required", [])
            if required:
                out[str(tool.get("table"))] = required[0]
    return out


def first_hit_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """The oracle, but every record a search lists after its first is taken for the first."""
    ids = id_params(episode)
    swap: dict[tuple[str, Any], Any] = {}  # (id parameter, a later hit) -> the first hit
    for call in task.oracle:
        args = {k: swap.get((k, v), v) for k, v in call.args.items()}
        step = episode.call(call.tool, args)
        spec = episode.world.tools_by_name.get(call.tool, {})  # ask_requester is the episode's, not the world's
        rows = (step.result or {}).get("results") if spec.get("kind") == "search" and step.result else None
        param = ids.get(str(spec.get("table")))
        if rows and len(rows) > 1 and param:
            for row in rows[1:]:
                swap[(param, row.get("id"))] = rows[0].get("id")
    return task.answer


def refusal_only_policy(task: Task, episode: Episode, rng: random.Random) -> Any:
    """What the tools allow, the handbook unread: the task's trap where it has one, else the oracle without
    handbook reads (a step the tool refuses ends where the oracle's alternative ends)."""
    plan = task.trap if any(c.tool in HANDBOOK_TOOLS for c in task.trap) else task.oracle  # not a twin's trap
    for call in plan:
        if call.tool not in HANDBOOK_TOOLS:
            episode.call(call.tool, call.args)
    return task.answer


HARD = {"first_hit": first_hit_policy, "refusal_only": refusal_only_policy}

"""How often a careful agent is graded unfairly: tasks replayed over MCP, then graded by the world's verifier.

The "careful agent" is scripted, not a model: it does what the task needs (the oracle's writes) the
way a careful operator who read the tool list would, which is not always the oracle's way. It reads
the business rules first, reads a contact before emailing them and gives the contact's own address
as well as the contact, names a rule by its name as search_business_rules shows it, lists records in
the order it found them reversed, and writes amounts as dollars ("$1,234.50"). Every variation is a
valid solution, so every failure is the grader's fault. Calls go through the MCP client (in-memory
transport) to the world's server; the episode is graded with Episode.verify.

    .venv/bin/python bench/fair_grading_bench.py data/worlds/insurance-claims.regional--v001 [...] [--per-family 4]

Not part of the test run. Prints one row per world and the unfair share.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from worldfactory.runtime.mcp_server import build_server
from worldfactory.runtime.world import World
from worldfactory.spec import Task


def careful_answer(world: World, task: Task) -> Any:
    """The expected answer as a careful agent words it (never a wrong one)."""
    a, kind = task.answer, task.answer_type
    if a is None:
        return None
    if kind == "reason":  # the rule as search_business_rules lists it: its name
        rule = next((r for r in world.spec.rules if a in (r.name, r.label)), None)
        return rule.name if rule else a
    if kind == "list" and isinstance(a, list):
        return list(reversed(a))
    if kind == "number":
        return f"${float(a):,.2f}"
    return a


async def careful_run(world: World, task: Task) -> tuple[bool, list[str]]:
    """Replay the task the careful way over MCP; the verdict and the variations made."""
    made: list[str] = []
    with world.episode(task.task_id) as ep:
        async with Client(build_server(world, ep)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            if "search_business_rules" in names:
                await client.call_tool("search_business_rules", {})
                made.append("extra_read")
            for call in task.oracle:
                args = dict(call.args)
                if call.tool == "create_email" and args.get("contact_id") and not args.get("to_address"):
                    got = await client.call_tool("get_contact", {"contact_id": args["contact_id"]})
                    email = (got.structured_content or {}).get("contact", {}).get("email")
                    if email:
                        args["to_address"] = email
                        made.append("recipient_fields")
                await client.call_tool(call.tool, args)
        answer = careful_answer(world, task)
        if answer != task.answer:
            made.append(f"answer_{task.answer_type}")
        return ep.verify(answer, explain=False).passed, made


def sample(world: World, per_family: int) -> list[Task]:
    seen: Counter[str] = Counter()
    out = []
    for task in sorted(world.tasks.values(), key=lambda t: t.task_id):
        if seen[task.family] < per_family and len(task.oracle) <= 60:
            seen[task.family] += 1
            out.append(task)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("worlds", nargs="+", type=Path)
    parser.add_argument("--per-family", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    rows = []
    for path in opts.worlds:
        world = World.open(path)
        tasks = sample(world, opts.per_family)
        unfair: Counter[str] = Counter()
        failed = 0
        for task in tasks:
            passed, made = anyio.run(careful_run, world, task)
            if not passed:
                failed += 1
                unfair.update(made or ["none"])
        rows.append({"world": world.world_id, "tasks": len(tasks), "unfair": failed,
                     "unfair_share": round(failed / len(tasks), 3) if tasks else 0.0,
                     "variations_in_unfair": dict(sorted(unfair.items()))})
    if opts.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['world']:<40} tasks {r['tasks']:>4}  unfair {r['unfair']:>3} ({r['unfair_share']:.1%})  "
              f"{r['variations_in_unfair']}")
    total = sum(r["tasks"] for r in rows)
    bad = sum(r["unfair"] for r in rows)
    print(f"all: {bad}/{total} careful solutions graded unfairly ({bad / total if total else 0:.1%})")


if __name__ == "__main__":
    main()

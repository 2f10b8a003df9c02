"""Why an episode failed: each failed episode sorted into one cause, from its trace, the verifier's
mismatches and the task's oracle, with no model.

The episode is replayed on fresh state and graded with the mismatches itemised (a run records only
the reward); its calls are then lined up with the oracle's. The first cause that applies, in the
order of CAUSES, is the episode's cause: an invalid call or an ignored rule explains what follows
it, a wrong record explains the wrong values written on it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel

CAUSES = {
    "invalid_call": "invalid calls (schema errors, unknown tools)",
    "rule_ignored": "business rule ignored (the tool refused and the agent went on, or it acted where a rule forbade)",
    "looped": "looped (the same call repeated)",
    "wrong_record": "wrong record acted on",
    "wrong_value": "wrong value written",
    "missing_write": "required write missing",
    "extra_write": "extra or collateral write",
    "gave_up": "gave up or answered early",
    "wrong_answer": "wrong answer",
    "other": "the end state differs in a way the calls do not explain",
}
LOOP = 3  # the same call this many times in a row (more than the oracle makes it) is a loop
RULE_TABLES = ("business_rules",)
GIVE_UP = re.compile(r"\b(could not|couldn't|cannot|can't|unable to|do not know|don't know|not sure)\b", re.I)


class Call(BaseModel):
    tool: str
    args: dict[str, Any]
    ok: bool = True
    error: str = ""


class Diagnosis(BaseModel):
    """One failed episode's cause, where it left the oracle's path, and the verifier's first mismatch."""

    world_id: str
    task_id: str
    family: str
    rollout: int
    cause: str
    detail: str
    instruction: str
    divergent_step: int | None
    divergent_call: Call | None
    oracle_call: Call | None
    mismatch: dict[str, Any] | None
    mismatches: int


def _key_args(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments that pick a record rather than set a value."""
    return {k: v for k, v in args.items() if k == "id" or k.endswith(("_id", "_number", "_code", "_ref"))}


def _is_write(world: Any, tool: str) -> bool:
    spec = world.tools_by_name.get(tool)
    if spec is None:
        return False
    return not (spec.get("annotations") or {}).get("read_only_hint", spec.get("kind") in ("get", "search", "list"))


def _reads_rule(world: Any, calls: list[Call]) -> bool:
    return any((world.tools_by_name.get(c.tool) or {}).get("table") in RULE_TABLES for c in calls)


def _calls(steps: list[dict[str, Any]]) -> list[Call]:
    out = []
    for s in sorted(steps, key=lambda s: s["step"]):
        args = json.loads(s["args_json"]) if "args_json" in s else s.get("args", {})
        flag = s.get("error")
        ok = not flag if isinstance(flag, bool) else bool(s.get("ok", True))
        text = s.get("error_text") or (flag if isinstance(flag, str) else "")
        out.append(Call(tool=s["tool"], args=args, ok=ok, error=text or ""))
    return out


def _replay(world: Any, task_id: str, calls: list[Call], answer: Any) -> list[dict[str, Any]]:
    """The verifier's itemised mismatches of these calls and this answer, on fresh state."""
    with world.episode(task_id) as ep:
        for c in calls:
            ep.call(c.tool, c.args)
        return [m.model_dump() for m in ep.verify(answer, explain=True).mismatches]


def _divergence(agent: list[Call], oracle: list[Call]) -> int | None:
    for i, (a, o) in enumerate(zip(agent, oracle, strict=False)):
        if (a.tool, a.args) != (o.tool, o.args):
            return i
    return None if len(agent) == len(oracle) else min(len(agent), len(oracle))


def _other_read(world: Any, calls: list[Call], oracle: list[Call]) -> tuple[Call, Call] | None:
    """The first read, in step with the oracle, of the same tool on another record (other key arguments)."""
    for a, o in zip(calls, oracle, strict=False):
        if a.tool != o.tool:
            return None
        if not _is_write(world, a.tool) and _key_args(a.args) and _key_args(a.args) != _key_args(o.args):
            return a, o
    return None


def _loop(calls: list[Call], oracle: list[Call]) -> Call | None:
    def longest(cs: list[Call]) -> dict[str, int]:
        best: dict[str, int] = {}
        run, prev = 0, None
        for c in cs:
            key = json.dumps([c.tool, c.args], sort_keys=True, default=str)
            run = run + 1 if key == prev else 1
            prev = key
            best[key] = max(best.get(key, 0), run)
        return best

    mine, theirs = longest(calls), longest(oracle)
    for c in calls:
        key = json.dumps([c.tool, c.args], sort_keys=True, default=str)
        if mine[key] >= LOOP and mine[key] > theirs.get(key, 0):
            return c
    return None


def classify(world: Any, episode: dict[str, Any]) -> tuple[str, str, list[dict[str, Any]]]:
    """(cause, a line saying why, the verifier's mismatches) of one failed episode."""
    task = world.tasks[episode["task_id"]]
    calls = _calls(episode["trace"])
    oracle = [Call(tool=c.tool, args=c.args) for c in task.oracle]
    mismatches = _replay(world, task.task_id, calls, episode.get("answer"))
    state = [m for m in mismatches if m["table"] != "<answer>"]

    bad = [c for c in calls if not c.ok and (c.error.startswith("unknown tool") or c.error.startswith("invalid "))]
    if bad:
        return "invalid_call", f"{len(bad)} invalid call(s), first {bad[0].tool}: {bad[0].error}", mismatches
    writes = [c for c in calls if c.ok and _is_write(world, c.tool)]
    gold = [c for c in oracle if _is_write(world, c.tool)]
    at = _divergence(calls, oracle)
    if at is not None and at < min(len(calls), len(oracle)):  # where it left the oracle's path: another record?
        a, o = calls[at], oracle[at]
        if a.ok and a.tool == o.tool and _is_write(world, a.tool) and _key_args(a.args) != _key_args(o.args):
            return "wrong_record", f"{a.tool} on {_key_args(a.args)} instead of {_key_args(o.args)}", mismatches
    refused = [i for i, c in enumerate(calls) if not c.ok and " refused: " in c.error]
    for i in refused:  # refused because it was the wrong record, not because a rule stood in the way
        c = calls[i]
        targets = [_key_args(o.args) for o in oracle if o.tool == c.tool]
        if targets and _key_args(c.args) and _key_args(c.args) not in targets:
            return "wrong_record", f"{c.tool} on {_key_args(c.args)} instead of {targets[0]} (refused: {c.error})", \
                mismatches
    def oracle_made_it(i: int) -> bool:  # the oracle made this call and it passed: an earlier slip caused the refusal
        same = [(c.tool, c.args) for c in calls[: i + 1]].count((calls[i].tool, calls[i].args))
        return same <= [(o.tool, o.args) for o in oracle].count((calls[i].tool, calls[i].args))

    refused = [i for i in refused if not oracle_made_it(i)]
    if refused and any(c.ok and _is_write(world, c.tool) for c in calls[refused[0] + 1:]):
        c = calls[refused[0]]
        return "rule_ignored", f"{c.tool} refused ({c.error}) and the agent went on writing", mismatches
    if refused and _reads_rule(world, oracle) and calls[refused[0]].tool not in {c.tool for c in oracle}:
        c = calls[refused[0]]
        return "rule_ignored", f"{c.tool} refused ({c.error}): a business rule forbids what the agent tried", \
            mismatches
    if state and _reads_rule(world, oracle) and {c.tool for c in writes} - {c.tool for c in gold}:
        return "rule_ignored", ("a business rule decides this task, and the agent's writes are not the ones "
                                "it allows"), mismatches
    loop = _loop(calls, oracle)
    if loop is not None:
        return "looped", f"{loop.tool}({json.dumps(loop.args, default=str)}) repeated", mismatches
    if state:
        left = Counter((c.tool, json.dumps(_key_args(c.args), sort_keys=True, default=str)) for c in writes)
        missing = []
        for g in gold:
            key = (g.tool, json.dumps(_key_args(g.args), sort_keys=True, default=str))
            if left[key] > 0:
                left[key] -= 1
                same = next(c for c in writes if c.tool == g.tool and _key_args(c.args) == _key_args(g.args))
                if same.args != g.args:
                    diff = sorted(k for k in {*same.args, *g.args} if same.args.get(k) != g.args.get(k))
                    return "wrong_value", f"{g.tool} on the right record with other values ({', '.join(diff)})", \
                        mismatches
            else:
                missing.append(g)
        extra = [c for c in writes if left[(c.tool, json.dumps(_key_args(c.args), sort_keys=True, default=str))] > 0]
        for m in missing:
            other = next((c for c in extra if c.tool == m.tool), None)
            if other is not None:
                return "wrong_record", (f"{m.tool} on {_key_args(other.args)} instead of {_key_args(m.args)}"), \
                    mismatches
        if missing:
            prefix = len(calls) < len(oracle) and all(
                (a.tool, a.args) == (o.tool, o.args) for a, o in zip(calls, oracle, strict=False))
            if prefix:
                return "gave_up", f"stopped after {len(calls)} of the oracle's {len(oracle)} calls", mismatches
            other = _other_read(world, calls, oracle)
            if other is not None:  # it went down another record's path and never got to the write
                a, o = other
                return "wrong_record", (f"read {a.tool} on {_key_args(a.args)} instead of {_key_args(o.args)}, "
                                        f"and {missing[0].tool} was never made"), mismatches
            return "missing_write", f"{missing[0].tool}({json.dumps(missing[0].args, default=str)}) never made", \
                mismatches
        if extra:
            return "extra_write", f"{extra[0].tool}({json.dumps(extra[0].args, default=str)}) was not asked for", \
                mismatches
        first = state[0]
        return "other", f"{first['table']}[{first['key']}].{first['column']} differs", mismatches
    answer = episode.get("answer")
    if answer is None or (isinstance(answer, str) and (not answer.strip() or GIVE_UP.search(answer))):
        return "gave_up", f"no answer given ({answer!r})", mismatches
    reads = {c.tool: _key_args(c.args) for c in oracle if _key_args(c.args)}
    for c in calls:
        if c.tool in reads and _key_args(c.args) and _key_args(c.args) != reads[c.tool] and c.args not in [
                o.args for o in oracle if o.tool == c.tool]:
            return "wrong_record", f"read {c.tool} on {_key_args(c.args)}, not {reads[c.tool]}", mismatches
    if len(calls) < len(oracle) and all((a.tool, a.args) == (o.tool, o.args) for a, o in zip(calls, oracle,
                                                                                             strict=False)):
        return "gave_up", f"answered after {len(calls)} of the oracle's {len(oracle)} calls", mismatches
    return "wrong_answer", f"answered {answer!r}", mismatches


def diagnose(world: Any, episode: dict[str, Any]) -> Diagnosis:
    cause, detail, mismatches = classify(world, episode)
    task = world.tasks[episode["task_id"]]
    calls = _calls(episode["trace"])
    oracle = [Call(tool=c.tool, args=c.args) for c in task.oracle]
    at = _divergence(calls, oracle)
    return Diagnosis(world_id=world.world_id, task_id=task.task_id, family=task.family, rollout=episode["rollout"],
                     cause=cause, detail=detail, instruction=task.instruction, divergent_step=at,
                     divergent_call=calls[at] if at is not None and at < len(calls) else None,
                     oracle_call=oracle[at] if at is not None and at < len(oracle) else None,
                     mismatch=mismatches[0] if mismatches else None, mismatches=len(mismatches))


class Report(BaseModel):
    """A run's failures by cause, by family and by world, with one example episode per cause."""

    run_id: str
    episodes: int
    failed: int
    by_cause: dict[str, int]
    by_family: dict[str, dict[str, int]]
    by_world: dict[str, dict[str, int]]
    examples: dict[str, Diagnosis]

    @property
    def top_cause(self) -> str | None:
        return max(self.by_cause, key=lambda c: (self.by_cause[c], -list(CAUSES).index(c))) if self.by_cause else None


def diagnoses(episodes: list[dict[str, Any]], worlds: dict[str, Any]) -> list[Diagnosis]:
    """Every failed episode diagnosed, in the episodes' order."""
    return [diagnose(worlds[e["world_id"]], e) for e in episodes if e["reward"] < 1.0]


def report(run_id: str, episodes: list[dict[str, Any]], worlds: dict[str, Any]) -> Report:
    """Diagnose every failed episode (in (world, task, rollout) order) and count the causes."""
    return tally(run_id, len(episodes), diagnoses(episodes, worlds))


def tally(run_id: str, episodes: int, diags: list[Diagnosis]) -> Report:
    """The counts by cause, family and world of these diagnoses, with the first example of each cause."""
    by_cause = Counter(d.cause for d in diags)
    by_family: dict[str, Counter[str]] = {}
    by_world: dict[str, Counter[str]] = {}
    examples: dict[str, Diagnosis] = {}
    for d in diags:
        by_family.setdefault(d.family, Counter())[d.cause] += 1
        by_world.setdefault(d.world_id, Counter())[d.cause] += 1
        examples.setdefault(d.cause, d)
    order = [c for c in CAUSES if c in by_cause]
    return Report(run_id=run_id, episodes=episodes, failed=len(diags),
                  by_cause={c: by_cause[c] for c in order},
                  by_family={f: dict(sorted(c.items())) for f, c in sorted(by_family.items())},
                  by_world={w: dict(sorted(c.items())) for w, c in sorted(by_world.items())},
                  examples={c: examples[c] for c in order})

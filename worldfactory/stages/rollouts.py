"""task_rollouts: k episodes per task with the configured policy, their pass rates and traces."""

from __future__ import annotations

import json

from worldfactory.stages.core import BuildContext, Stage, StageError

REPLAY_SAMPLE = 25  # rollout episodes whose traces the proof replays


def make_rollouts(ctx: BuildContext) -> dict[str, int]:
    """k rollouts per task with the configured policy: pass rates, and every trace (the catalogs' source)."""
    from worldfactory.rollouts import histogram, pass_rates, run_rollouts, traces_file

    world = ctx.world(STAGE)
    cfg = ctx.rollout
    rollouts = run_rollouts(world, cfg)  # raises before anything is written if a model server keeps failing
    rates = pass_rates(rollouts)
    ctx.usage.llm_prompt_tokens += sum(r.prompt_tokens for r in rollouts)
    ctx.usage.llm_completion_tokens += sum(r.completion_tokens for r in rollouts)
    ctx.usage.cost_usd += round(sum(r.cost_usd for r in rollouts), 6)
    ctx.work.write("traces.jsonl.gz", traces_file(rollouts))
    summary = {"policy": cfg.label, "k": cfg.k, "histogram": histogram(rates),
               "pass_rates": {tid: [p, n] for tid, (p, n) in rates.items()}}
    if cfg.policy != "openai":  # a model's run is not reproducible; a synthetic one is, byte for byte
        summary["reproducible"] = True
    ctx.work.write("rollouts.json", (json.dumps(summary, indent=1, sort_keys=True) + "\n").encode())
    return {"rollouts": len(rollouts), "tasks": len(rates), "steps": sum(r.steps for r in rollouts),
            **{f"pass_rate {b}": n for b, n in summary["histogram"].items()}}


def prove_rollouts(ctx: BuildContext) -> dict[str, int | float | str]:
    """Every task has k rollouts, and recorded traces replay identically step by step on fresh state."""
    from worldfactory.rollouts import json_steps, replay_rows, traces_file_episodes

    world = ctx.world(STAGE)
    summary = json.loads(ctx.work.read("rollouts.json", STAGE.name))
    missing = [t for t in world.tasks if t not in summary["pass_rates"]]
    if missing:
        raise StageError(f"{len(missing)} tasks have no rollouts, e.g. {missing[0]}")
    traces = traces_file_episodes(ctx.work.read("traces.jsonl.gz", STAGE.name))  # steps parsed for the sample only
    sample = sorted(traces)[:: max(1, len(traces) // REPLAY_SAMPLE)][:REPLAY_SAMPLE]
    episodes = {key: [{"task_id": key[0], "rollout": key[1], **s} for s in json_steps(traces[key])] for key in sample}
    differ = [line for key in sample for line in replay_rows(world, episodes[key])]
    if differ:
        raise StageError(f"{len(differ)} replayed steps differ from their traces, first: {differ[0]}")
    return {"tasks": len(summary["pass_rates"]), "replayed_episodes": len(sample),
            "replayed_steps": sum(len(episodes[k]) for k in sample), "policy": summary["policy"]}


STAGE = Stage(
    name="task_rollouts",
    check="traces_replay",
    proves=("every task has k rollouts and sampled traces replay identically"),
    make=make_rollouts,
    prove=prove_rollouts,
    writes=("rollouts.json", "traces.jsonl.gz"),
    reads=("brief.json", "spec.json", "schema.sql", "seed.db",
           "tools.py", "tools.json", "tasks.jsonl", "verifiers.json"),
    confined=("make", "prove"),
    make_here=lambda ctx: ctx.rollout.needs_network,  # a model's rollouts: here, their episodes in the worker
    uses_model=True,
)

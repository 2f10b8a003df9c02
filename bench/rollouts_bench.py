"""Rollout throughput: episodes and tool steps per second in process, and through the agent loop.

1. In process: the noisy policy (error rate 0.1) on one world, k=8, one core. Rollouts run each
   distinct episode of a task once (worldfactory/rollouts.py), so this prints the steps recorded
   and the steps run.
2. Agent loop: the OpenAI-compatible client against the scripted loopback server from the tests
   (tests/llm_server.py), concurrency 32. The server does almost nothing, so the time per step is
   the harness's own overhead: HTTP, JSON, tool-schema checks, the episode.
Usage: python bench/rollouts_bench.py [WORLD_ID]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.llm_server import LLMServer, ScriptedModel  # noqa: E402
from worldfactory.rollouts import RolloutConfig, run_rollouts  # noqa: E402
from worldfactory.runtime.world import World  # noqa: E402
from worldfactory.stages.pipeline import build_world  # noqa: E402
from worldfactory.templates import load_templates  # noqa: E402


def main() -> None:
    ts = load_templates()
    wid = sys.argv[1] if len(sys.argv) > 1 else ts.catalog.examples[0]
    out = Path(tempfile.mkdtemp(prefix="wf-rollouts-bench-"))
    build_world(wid, out, ts)
    world = World.open(out / "worlds" / wid)

    t0 = time.perf_counter()
    rollouts = run_rollouts(world, RolloutConfig(policy="noisy", k=8, error_rate=0.1))
    secs = time.perf_counter() - t0
    steps = sum(r.steps for r in rollouts)
    # A reused episode shares its trace's Step objects, and episodes that part from a shared prefix share that
    # prefix's: the distinct Step objects are the tool calls actually run.
    run = len({id(s) for r in rollouts for s in r.trace})
    print(f"{wid}, noisy k=8 in process: {len(rollouts)} episodes, {steps} steps recorded, {run} "
          f"run, in {secs:.2f} s: {len(rollouts) / secs:.0f} episodes/s, {steps / secs:.0f} steps/s recorded, "
          f"{run / secs:.0f} steps/s run")

    ids = [t.task_id for t in world.tasks.values() if len(t.oracle) <= 20]
    plans = {world.tasks[t].instruction: ([c.model_dump() for c in world.tasks[t].oracle], world.tasks[t].answer)
             for t in ids}
    with LLMServer(ScriptedModel(plans)) as url:
        cfg = RolloutConfig(policy="openai", k=2, base_url=url, model="scripted", concurrency=32)
        t0 = time.perf_counter()
        rollouts = run_rollouts(world, cfg, ids)
        secs = time.perf_counter() - t0
    steps = sum(r.steps for r in rollouts)
    turns = steps + len(rollouts)
    print(f"agent loop, loopback server, concurrency 32: {len(rollouts)} episodes, {steps} tool steps, "
          f"{turns} model turns in {secs:.2f} s: {len(rollouts) / secs:.1f} episodes/s, {steps / secs:.0f} steps/s, "
          f"{secs / turns * 1000:.2f} ms per turn (harness + loopback HTTP)")
    print(f"pass rate through the loop: {sum(r.reward for r in rollouts) / len(rollouts):.3f} (scripted, no slips)")


if __name__ == "__main__":
    main()

"""The diagnosis loop, closed with the scripted weak policies: run, diagnose, target, build, run again.

For each weak policy (rule_blind, first_write, name_confuser) and each example world: an evaluation
run (k=8), its top cause, the share of tasks that exercise the weakness (tasks with at least one failed
episode of the eight: the policy acts on its habit in half its episodes, so a task that exercises it
goes unseen with probability 1/256) and the policy's band; then `target` (propose, register, build
with the engine) and the same on the targeted world. CPU seconds of this process and its children
(confined workers) per eval run; wall seconds beside them.
Usage: python bench/target_loop.py [DATA]   (DATA: a data root with the example worlds built; default: build them)
"""

from __future__ import annotations

import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worldfactory.cli import main as cli  # noqa: E402
from worldfactory.confine import open_world  # noqa: E402
from worldfactory.evals import runs  # noqa: E402
from worldfactory.evals.summary import load_summary  # noqa: E402
from worldfactory.evals.target import propose, register  # noqa: E402
from worldfactory.policies.weak import WEAK  # noqa: E402
from worldfactory.rollouts import RolloutConfig  # noqa: E402
from worldfactory.templates import load_templates  # noqa: E402

K = 8
WEAKNESS = {"rule_blind": "rule_ignored", "first_write": "gave_up", "name_confuser": "wrong_record"}


def cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def evaluate(data: Path, bundle: Path, policy: str) -> dict[str, Any]:
    c0, w0 = cpu(), time.perf_counter()
    info = runs.execute(data, [bundle], RolloutConfig(policy=policy, k=K), None, open_world)
    seconds = {"cpu": round(cpu() - c0, 2), "wall": round(time.perf_counter() - w0, 2)}
    episodes = runs.run_episodes(data, info.run_id)
    per_task: dict[str, list[bool]] = {}
    for e in episodes:
        per_task.setdefault(e["task_id"], []).append(e["reward"] >= 1.0)
    summary = load_summary(runs.run_dir(data, info.run_id))
    assert summary is not None
    exercised = sum(not all(v) for v in per_task.values())
    return {"run_id": info.run_id, "tasks": len(per_task), "exercised": exercised,
            "share": round(exercised / len(per_task), 3), "top_cause": summary.top_cause,
            "band": sum(summary.band.values()), "causes": summary.causes, "seconds": seconds}


def main() -> None:
    ts = load_templates()
    data = Path(tempfile.mkdtemp(prefix="wf-target-loop-"))
    if len(sys.argv) > 1:
        shutil.copytree(Path(sys.argv[1]) / "worlds", data / "worlds",
                        ignore=lambda d, names: [n for n in names if n.startswith("brief.") and Path(d, n).is_dir()])
    else:
        assert cli(["build", "--examples", "--no-dagster", "--data", str(data)]) == 0
    rows = []
    for policy in WEAK:
        for wid in ts.catalog.examples:
            before = evaluate(data, data / "worlds" / wid, policy)
            plan = propose(data, before["run_id"])
            ids = register(plan, ts)
            c0 = cpu()
            if cli(["build", *ids, "--no-dagster", "--data", str(data)]) != 0:  # the table goes on; the exit fails
                rows.append({"policy": policy, "world": wid, "target": ids[0], "knobs": plan.briefs[0].knobs,
                             "before": before, "after": None})
                print(f"{policy:<14} {wid:<38} top {before['top_cause']}  share {before['share']:.0%}: the targeted "
                      f"world {ids[0]} was not built", flush=True)
                continue
            build_cpu = round(cpu() - c0, 2)
            after = evaluate(data, data / "worlds" / ids[0], policy)
            rows.append({"policy": policy, "world": wid, "target": ids[0], "knobs": plan.briefs[0].knobs,
                         "before": before, "after": after, "build_cpu": build_cpu})
            print(f"{policy:<14} {wid:<38} top {before['top_cause']} -> {after['top_cause']}  share "
                  f"{before['share']:.0%} ({before['exercised']}/{before['tasks']}) -> {after['share']:.0%} "
                  f"({after['exercised']}/{after['tasks']})  band {before['band']} -> {after['band']}  eval "
                  f"{before['seconds']['cpu']}/{after['seconds']['cpu']} CPU s ({before['seconds']['wall']}/"
                  f"{after['seconds']['wall']} wall)", flush=True)
    built = all(r["after"] is not None for r in rows)
    ok = built and all(r["before"]["top_cause"] == WEAKNESS[r["policy"]] for r in rows)
    print(f"top cause is the weakness in {sum(r['before']['top_cause'] == WEAKNESS[r['policy']] for r in rows)}"
          f"/{len(rows)} pairs; targeted worlds built: {sum(r['after'] is not None for r in rows)}/{len(rows)}; "
          f"bands non-empty after: {all(r['after']['band'] > 0 for r in rows if r['after'] is not None)}")
    (data / "target_loop.json").write_text(json.dumps(rows, indent=1, sort_keys=True))
    print(f"details: {data / 'target_loop.json'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

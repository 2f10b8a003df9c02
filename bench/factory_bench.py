"""Where a world's build time goes: seconds per stage, make and prove apart, and a profile of the slowest.

Builds each world with the engine alone (every stage, 8 noisy rollouts per task, the full
validity check), one process, one core, into a temp folder. Prints a table of CPU seconds per
stage (make, prove; child processes included: the tools proof runs in a sandboxed child) and
the total, then the top of a cProfile of the slowest stage of the first world. CPU seconds, not
wall: a busy machine inflates wall time, not the work done.
The target is at most 3 s per world.
Usage: python bench/factory_bench.py [--profile N] [WORLD_ID ...]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
from pathlib import Path

from worldfactory import confine
from worldfactory.confine import set_unconfined
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, WorkDir, inputs_fingerprint, run_make, run_prove
from worldfactory.templates import load_templates


def cpu() -> float:
    """This process, its finished children and the confined worker (which runs the stages that execute tools)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + confine.worker_cpu_seconds()


def build(world_id: str, root: Path, profile_stage: str | None = None) -> tuple[dict[str, tuple[float, float]], str]:
    """CPU seconds (make, prove) per stage; the profile text of `profile_stage` if given."""
    ts = load_templates()
    ctx = BuildContext(world_id=world_id, templates=ts, work=WorkDir(root / "build" / world_id, world_id),
                       data_root=root, inputs=inputs_fingerprint(ts, world_id))
    out: dict[str, tuple[float, float]] = {}
    text = ""
    for stage in STAGES:
        prof = cProfile.Profile() if stage.name == profile_stage else None
        if prof:
            prof.enable()
        t0 = cpu()
        run_make(stage, ctx)
        t1 = cpu()
        proof = run_prove(stage, ctx)
        t2 = cpu()
        if prof:
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
            text = buf.getvalue()
        if not proof.passed:
            raise SystemExit(f"{world_id}: {stage.name} failed: {proof.reason}")
        out[stage.name] = (t1 - t0, t2 - t1)
    return out, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("worlds", nargs="*")
    ap.add_argument("--profile", type=int, default=25, help="profile lines to print (0: no profile)")
    args = ap.parse_args()
    worlds = args.worlds or load_templates().catalog.examples
    root = Path(tempfile.mkdtemp(prefix="wf-factory-bench-"))
    results = {wid: build(wid, root)[0] for wid in worlds}
    short = [w.split("--")[0].split(".")[0] for w in worlds]
    print(f"{'stage':18}" + "".join(f"{s[:18]:>22}" for s in short))
    print(f"{'':18}" + "".join(f"{'make':>11}{'prove':>11}" for _ in worlds))
    for stage in STAGES:
        print(f"{stage.name:18}" + "".join(f"{results[w][stage.name][0]:11.3f}{results[w][stage.name][1]:11.3f}"
                                           for w in worlds))
    totals = {w: sum(m + p for m, p in results[w].values()) for w in worlds}
    print(f"{'total (CPU s)':18}" + "".join(f"{totals[w]:22.2f}" for w in worlds))
    if args.profile:
        first = worlds[0]
        slowest = max(results[first], key=lambda s: sum(results[first][s]))
        set_unconfined()  # the profile must see the stage's own work, not a wait on the confined worker
        _, text = build(first, Path(tempfile.mkdtemp(prefix="wf-factory-bench-")), slowest)
        print(f"\nprofile of {slowest} ({first}), make + prove, run unconfined so the profiler sees it:")
        print("\n".join(text.splitlines()[: args.profile + 8]))


if __name__ == "__main__":
    main()

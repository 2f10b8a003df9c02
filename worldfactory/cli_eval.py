"""`worldfactory eval`: evaluation runs (run, list, show, compare, report, delete), kept apart from the build."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worldfactory.evals import runs


def _data(args: argparse.Namespace) -> Path:
    from worldfactory.cli import _root

    return _root(args)


def _print(obj: Any) -> None:
    print(json.dumps(obj, indent=1, sort_keys=True, default=str))


def play_run(args: argparse.Namespace, bundles: list[Path], k: int,
             on_done: Callable[[int], None] | None = None) -> runs.RunInfo:
    """Play (or resume) the run these arguments describe: `eval run` and `rollouts` both come here."""
    from worldfactory import cli
    from worldfactory.confine import open_world

    cfg = cli.rollout_config(args, k).model_copy(update={"seed": args.seed, "concurrency": args.concurrency})
    tasks = args.tasks.split(",") if args.tasks else None
    if tasks:
        served: set[str] = set()
        for b in bundles:
            served |= {json.loads(line)["task_id"] for line in (b / "tasks.jsonl").read_text().splitlines() if line}
        unknown = [t for t in tasks if t not in served]
        if unknown:
            raise runs.RunError(f"task(s) {', '.join(unknown)} are in none of the worlds given; "
                                f"`worldfactory show WORLD` lists a world's tasks")
    verify = not args.no_verify
    return runs.execute(_data(args), bundles, cfg, tasks, lambda b: open_world(b, verify=verify), name=args.name,
                        on_done=on_done)


def cmd_run(args: argparse.Namespace) -> int:
    from worldfactory import cli

    info = play_run(args, [cli.resolve_world(w, _data(args)) for w in args.worlds], args.k)
    if args.json:
        _print(info.model_dump())
    else:
        print(f"run {info.run_id}: {info.passes}/{info.episodes} episodes passed; "
              f"folder {runs.run_dir(_data(args), info.run_id)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    root = _data(args)
    infos = [runs.load_run(root, rid) for rid in runs.list_run_ids(root)]
    if args.json:
        _print([i.model_dump() for i in infos])
        return 0
    for i in infos:
        state = "complete" if i.complete else "unfinished (run it again to resume)"
        print(f"{i.run_id}\t{i.config.label}\tk={i.config.k}\t{len(i.config.worlds)} world(s)\t"
              f"{i.passes}/{i.episodes} passed\t{state}")
    if not infos:
        print("no evaluation runs yet; start one with `worldfactory eval run WORLD --policy P`")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from worldfactory.evals.stats import family_rates

    root = _data(args)
    info = runs.load_run(root, args.run)
    rates = family_rates(runs.run_episodes(root, args.run))
    bands = runs.band(runs.run_episodes(root, args.run))
    from worldfactory.evals.summary import load_summary

    summary = load_summary(runs.run_dir(root, args.run))
    out = {"run": info.model_dump(), "families": {f: r.model_dump() for f, r in rates.items()},
           "band": {w: len(rows) for w, rows in bands.items()},
           "causes": summary.causes if summary else None, "top_cause": summary.top_cause if summary else None}
    if args.json:
        _print(out)
        return 0
    print(json.dumps(info.config.model_dump(), indent=1, sort_keys=True))
    for fam, r in rates.items():
        print(f"{fam:<14} pass^1 {r.pass1.text():<32} pass^k {r.passk.text()}")
    print("band (0 < pass rate < 1): " + ", ".join(f"{w}: {n}" for w, n in out["band"].items()))
    if summary is not None and summary.causes:
        print("failures by cause: " + ", ".join(f"{c} {n}" for c, n in summary.causes.items())
              + f" (`worldfactory eval report {info.run_id}` for examples)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from worldfactory.evals.stats import compare

    root = _data(args)
    table = compare(runs.run_episodes(root, args.a), runs.run_episodes(root, args.b))
    if args.json:
        _print({f: {s: (r.model_dump() if r else None) for s, r in v.items()} for f, v in table.items()})
        return 0
    print(f"{'family':<14} {'pass^1 ' + args.a:<40} {'pass^1 ' + args.b:<40} {'pass^k ' + args.a:<40} "
          f"pass^k {args.b}")
    for fam, v in table.items():
        a, b = v["a"], v["b"]
        print(f"{fam:<14} {a.pass1.text() if a else '-':<40} {b.pass1.text() if b else '-':<40} "
              f"{a.passk.text() if a else '-':<40} {b.passk.text() if b else '-'}")
    print("95% Wilson intervals; pass^k: every one of a task's k episodes passed")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from worldfactory.confine import open_world
    from worldfactory.evals.causes import CAUSES, report

    root = _data(args)
    info = runs.load_run(root, args.run)
    episodes = runs.run_episodes(root, args.run)
    worlds = {w: open_world(Path(b), verify=not args.no_verify) for w, b in info.bundles.items()
              if any(e["world_id"] == w and e["reward"] < 1.0 for e in episodes)}
    rep = report(info.run_id, episodes, worlds)
    (runs.run_dir(root, info.run_id) / "report.json").write_text(
        json.dumps(rep.model_dump(), indent=1, sort_keys=True, default=str) + "\n")
    if args.json:
        _print(rep.model_dump())
        return 0
    print(f"run {rep.run_id}: {rep.failed} of {rep.episodes} episodes failed")
    for cause, n in rep.by_cause.items():
        print(f"  {n:>6}  {cause:<14} {CAUSES[cause]}")
    for title, table in (("by family", rep.by_family), ("by world", rep.by_world)):
        print(title + ":")
        for key, counts in table.items():
            print(f"  {key}: " + ", ".join(f"{c} {n}" for c, n in counts.items()))
    print("examples:")
    for cause, d in rep.examples.items():
        print(f"  [{cause}] {d.world_id} {d.task_id} rollout {d.rollout}: {d.instruction}")
        print(f"      {d.detail}")
        if d.divergent_step is not None:
            got = f"{d.divergent_call.tool}({json.dumps(d.divergent_call.args)})" if d.divergent_call else "(stopped)"
            want = f"{d.oracle_call.tool}({json.dumps(d.oracle_call.args)})" if d.oracle_call else "(nothing)"
            print(f"      step {d.divergent_step}: made {got}, the oracle {want}")
        if d.mismatch:
            m = d.mismatch
            print(f"      mismatch {m['table']}[{m['key']}].{m['column']}: expected {m['expected']!r}, "
                  f"got {m['got']!r}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    removed = runs.delete_run(_data(args), args.run)
    print(f"deleted run {args.run}: {len(removed)} path(s)")
    return 0


def cmd_target(args: argparse.Namespace) -> int:
    """Propose and register a run's targeted variants, then build them (the same pipeline as any world)."""
    from worldfactory.cli import main, templates_root
    from worldfactory.evals.summary import load_report, write_summary
    from worldfactory.evals.target import propose, register
    from worldfactory.templates import load_templates

    root = _data(args)
    if load_report(runs.run_dir(root, args.run)) is None:  # a run from before summaries: diagnose it now
        from worldfactory.confine import open_world

        write_summary(root, args.run, lambda b: open_world(b, verify=not args.no_verify))
    plan = propose(root, args.run)
    ids = register(plan, load_templates(templates_root()))
    if args.json:
        _print(plan.model_dump())
    else:
        print(f"run {plan.run_id}: dominant cause(s) {', '.join(plan.causes)}")
        for t in plan.briefs:
            mix = ", ".join(f"{f} x{v:g}" for f, v in t.task_mix.items())
            print(f"  {t.world_id} (from {t.source}): {', '.join(t.knobs)}; mix {mix or '-'}; "
                  f"{len(t.rules)} rule(s) near thresholds; scale {t.scale if t.scale is not None else '-'}")
            print(f"      brief {t.path}")
    if args.no_build:
        print("registered; `worldfactory build " + " ".join(ids) + "` (or the Dagster sensor) builds them",
              file=sys.stderr)
        return 0
    build = ["build", *ids, "--data", str(root)] + (["--no-dagster"] if args.no_dagster else [])
    if not args.json:
        return main(build)
    with contextlib.redirect_stdout(sys.stderr):  # stdout holds the plan's JSON alone
        return main(build)


def offer_weak(p: argparse.ArgumentParser) -> None:
    """The scripted weak policies among --policy's choices (the diagnosis's, the hard tier's and the careless
    ones): evaluation runs (eval run, rollouts) offer them."""
    from worldfactory.policies.careless import CARELESS
    from worldfactory.policies.hard import HARD
    from worldfactory.policies.weak import WEAK

    for action in p._actions:
        if action.dest == "policy" and action.choices is not None:
            action.choices = [*action.choices, *WEAK, *HARD, *CARELESS]


def add_parser(sub: Any) -> None:
    """The `eval` command group, on the main parser's subcommands."""
    from worldfactory.cli import _policy_args, _sandbox_args

    ev = sub.add_parser("eval", help="evaluation runs: run, list, show, compare, report, delete")
    es = ev.add_subparsers(dest="eval_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", help="data root (default $WORLDFACTORY_DATA or data/)")
        p.add_argument("--json", action="store_true")

    r = es.add_parser("run", help="play a policy on worlds as a run of its own (resumes an unfinished one)")
    r.add_argument("worlds", nargs="+", metavar="WORLD")
    _policy_args(r, default="noisy")
    offer_weak(r)
    r.add_argument("-k", type=int, default=4, help="episodes per task (default 4)")
    r.add_argument("--tasks", help="comma-separated task IDs (default: every task)")
    r.add_argument("--seed", type=int, default=0, help="0: the build's episode seeds; another draws others")
    r.add_argument("--name", default="", help="the run id (default: the policy label and a configuration hash)")
    r.add_argument("--concurrency", type=int, default=8, help="a model's episodes at once (default 8)")
    common(r)
    _sandbox_args(r)
    r.set_defaults(fn=cmd_run)

    ls = es.add_parser("list", help="every run, its policy and whether it finished")
    common(ls)
    ls.set_defaults(fn=cmd_list)

    sh = es.add_parser("show", help="a run's configuration, pass^1 and pass^k per family, and its band")
    sh.add_argument("run", metavar="RUN")
    common(sh)
    sh.set_defaults(fn=cmd_show)

    cp = es.add_parser("compare", help="two runs: pass^1 and pass^k per family with 95% Wilson intervals")
    cp.add_argument("a", metavar="RUN_A")
    cp.add_argument("b", metavar="RUN_B")
    common(cp)
    cp.set_defaults(fn=cmd_compare)

    rp = es.add_parser("report", help="why a run's episodes failed: counts by cause, family, world; examples")
    rp.add_argument("run", metavar="RUN")
    common(rp)
    _sandbox_args(rp)
    rp.set_defaults(fn=cmd_report)

    t = sub.add_parser("target", help="variants aimed at a run's dominant failure causes: register and build them")
    t.add_argument("run", metavar="RUN")
    t.add_argument("--no-build", action="store_true", help="only register the brief files (the sensor builds them)")
    t.add_argument("--no-dagster", action="store_true", help="build with the engine alone, as `build --no-dagster`")
    common(t)
    _sandbox_args(t)
    t.set_defaults(fn=cmd_target)

    d = es.add_parser("delete", help="remove a run's folder and catalog rows (nothing else)")
    d.add_argument("run", metavar="RUN")
    common(d)
    d.set_defaults(fn=cmd_delete)


def run_bands(root: Path, run: str, bundles: list[Path] | None) -> tuple[list[Path], dict[str, dict[str, float]]]:
    """The bundles a run played (or those given) and, per world, the run's band: task id -> pass rate."""
    info = runs.load_run(root, run)
    bands: dict[str, dict[str, float]] = {w: {} for w in info.config.worlds}
    for row in runs.curated_tasks(root, run):
        bands[row["world_id"]][row["task_id"]] = row["pass_rate"]
    chosen = bundles if bundles is not None else [Path(b) for b in info.bundles.values()]
    return chosen, bands

"""The `worldfactory` command: seeds, build, show, run, serve."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from worldfactory.build.bundle import STAGES

ERR = Console(stderr=True)


def out_console() -> Console:
    """Tables read badly at 80 columns: use 120 when the output is not a terminal."""
    return Console() if sys.stdout.isatty() else Console(width=120)


def data_root() -> Path:
    return Path(os.environ.get("WORLDFACTORY_DATA", "data"))


def resolve_world(ref: str) -> Path:
    """WORLD is a bundle path or a world ID under data/worlds/."""
    path = Path(ref)
    if path.is_dir():
        return path
    candidate = data_root() / "worlds" / ref
    if candidate.is_dir():
        return candidate
    from worldfactory.runtime.world import WorldError

    raise WorldError(f"no world '{ref}': not a folder, and not built under {data_root() / 'worlds'}; "
                     f"build it with `worldfactory build {ref}`")


def cmd_seeds(args: argparse.Namespace) -> int:
    from worldfactory.seeds import seed_types
    from worldfactory.templates import load_templates

    ts = load_templates()
    if args.json:
        print(json.dumps({"seed_types": seed_types(ts), "variants": ts.catalog.variants,
                          "examples": ts.catalog.examples}, indent=1))
        return 0
    table = Table(title=f"{len(seed_types(ts))} seed types x {ts.catalog.variants} variants")
    for col in ("seed type", "domain", "company type", "example world ID"):
        table.add_column(col)
    for s in seed_types(ts):
        d, c = s.split(".")
        table.add_row(s, ts.domains[d].title, ts.company_types[c].title, f"{s}--v001")
    out_console().print(table)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from worldfactory.build.pipeline import build_world
    from worldfactory.templates import load_templates

    ts = load_templates()
    ids = list(args.world_ids) + (ts.catalog.examples if args.examples else [])
    if not ids:
        ERR.print("error: name at least one world ID, or pass --examples (see `worldfactory seeds`)")
        return 2
    out = Path(args.out) if args.out else data_root() / "worlds"
    from worldfactory.seeds import parse_world_id

    for wid in ids:
        parse_world_id(wid, ts)  # fail fast, before any work starts
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=ERR, transient=False) as progress:
        bar = progress.add_task("building", total=len(ids) * len(STAGES))
        for wid in ids:
            done = 0

            def step(stage: str, wid: str = wid) -> None:
                nonlocal done
                progress.update(bar, description=f"{wid}: {stage}", advance=1 if done else 0)
                done += 1

            result = build_world(wid, out, ts, force=args.force, progress=step)
            progress.update(bar, completed=(ids.index(wid) + 1) * len(STAGES), description=f"{wid}: done")
            results.append(result)
    _print_results(results, args.json)
    return 0


def _print_results(results: list[Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps([r.model_dump() for r in results], indent=1))
        return
    table = Table(title="worlds")
    table.add_column("world", no_wrap=True)
    for col in ("tables", "rows", "tools", "tasks", "oracle", "null", "build"):
        table.add_column(col, no_wrap=True)
    for r in results:
        v = r.verification
        table.add_row(r.world_id, str(r.counts["tables"]), str(r.counts["rows"]), str(r.counts["tools"]),
                      str(r.counts["tasks"]), f"{v['oracle_pass']}/{v['tasks']}", f"{v['null_pass']}/{v['tasks']}",
                      "cached" if r.skipped else f"{r.seconds:.1f}s")
    out_console().print(table)
    out_console().print("oracle: tasks whose oracle plan passes its verifier; null: tasks that doing nothing passes "
                    "(must be 0). cached: already up to date.")


def cmd_show(args: argparse.Namespace) -> int:
    path = resolve_world(args.world)
    manifest = json.loads((path / "world.json").read_text())
    if args.json:
        print(json.dumps(manifest, indent=1, sort_keys=True))
        return 0
    console = out_console()
    console.print(f"[bold]{manifest['world_id']}[/bold]  {manifest['company_name']}  (clock {manifest['clock']})")
    console.print(f"bundle: {path}")
    console.print(", ".join(f"{k}: {v}" for k, v in manifest["counts"].items()))
    console.print("task families: " + ", ".join(f"{k} {v}" for k, v in manifest["task_families"].items()))
    tasks = [json.loads(line) for line in (path / "tasks.jsonl").read_text().splitlines()[: args.tasks]]
    table = Table(title=f"first {len(tasks)} tasks")
    for col in ("task", "family", "steps", "instruction"):
        table.add_column(col)
    for t in tasks:
        table.add_row(t["task_id"], t["family"], str(len(t["oracle"])), t["instruction"])
    console.print(table)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from worldfactory.policies.base import run_policy
    from worldfactory.runtime.world import World

    world = World.open(resolve_world(args.world))
    result = run_policy(world, args.task_id, args.policy)
    if args.json:
        out = {"world_id": result.world_id, "task_id": result.task_id, "policy": result.policy,
               "passed": result.verdict.passed, "reward": result.verdict.reward, "steps": result.steps,
               "answer": result.answer, "mismatches": [m.model_dump() for m in result.verdict.mismatches],
               "trace": [s.model_dump() for s in result.trace]}
        print(json.dumps(out, indent=1, default=str))
        return 0
    console = out_console()
    console.print(f"[bold]{args.task_id}[/bold]: {world.task(args.task_id).instruction}")
    for s in result.trace:
        mark = "[green]ok[/green]" if s.ok else f"[red]error[/red] {s.error}"
        console.print(f"  {s.index:>4} {s.tool}({json.dumps(s.args)}) {mark}")
    if result.answer is not None:
        console.print(f"  answer: {result.answer}")
    verdict = "[green]PASSED[/green]" if result.verdict.passed else "[red]FAILED[/red]"
    console.print(f"{verdict} reward={result.verdict.reward} steps={result.steps}")
    for m in result.verdict.mismatches[:20]:
        console.print(f"  mismatch {m.table}[{m.key}].{m.column}: expected {m.expected!r}, got {m.got!r}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from worldfactory.runtime.mcp_server import serve
    from worldfactory.runtime.world import World

    world = World.open(resolve_world(args.world))
    if args.transport == "http":
        ERR.print(f"serving {world.world_id} over streamable HTTP at http://{args.host}:{args.port}/mcp")
    serve(world, args.transport, args.host, args.port)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="worldfactory", description="Build, serve and grade tool-use worlds.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("seeds", help="list the seed types of the catalog")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_seeds)

    b = sub.add_parser("build", help="build and verify worlds")
    b.add_argument("world_ids", nargs="*", metavar="WORLD_ID")
    b.add_argument("--examples", action="store_true", help="also build the catalog's example worlds")
    b.add_argument("--out", help="output folder (default data/worlds)")
    b.add_argument("--force", action="store_true", help="rebuild even when up to date")
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_build)

    sh = sub.add_parser("show", help="summarise a built world")
    sh.add_argument("world", metavar="WORLD")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--tasks", type=int, default=10, help="how many tasks to list")
    sh.set_defaults(fn=cmd_show)

    r = sub.add_parser("run", help="run one task with a policy and grade it")
    r.add_argument("world", metavar="WORLD")
    r.add_argument("task_id", metavar="TASK_ID")
    r.add_argument("--policy", default="oracle", choices=["oracle", "null"])
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=cmd_run)

    sv = sub.add_parser("serve", help="serve a world's tools over MCP")
    sv.add_argument("world", metavar="WORLD")
    sv.add_argument("--transport", default="stdio", choices=["stdio", "http"])
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.set_defaults(fn=cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from worldfactory.errors import USER_ERRORS

    try:
        return int(args.fn(args))
    except USER_ERRORS as exc:
        ERR.print(f"error: {exc}", markup=False, highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())

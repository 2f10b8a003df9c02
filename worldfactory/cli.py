"""The `worldfactory` command: seeds, check-pack, pack-schema, build, show, run, rollouts, replay, serve,
image, query, delete, ui."""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from worldfactory.data_root import data_root, resolve_world
from worldfactory.parallel import default_jobs
from worldfactory.ports import SERVE_PORT
from worldfactory.run_size import WORLDS_PER_RUN
from worldfactory.safe_text import printable
from worldfactory.stages import STAGES

if TYPE_CHECKING:
    from collections.abc import Iterator

    from worldfactory.rollouts import RolloutConfig



class _ErrorConsole(Console):
    """stderr, with the control characters of what is said (a model's or a pack's text) shown as escapes."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)


ERR = _ErrorConsole(stderr=True)


def out_console() -> Console:
    """Tables read badly at 80 columns: use 120 when the output is not a terminal."""
    return Console() if sys.stdout.isatty() else Console(width=120)


def cmd_check_pack(args: argparse.Namespace) -> int:
    """Validate domain packs, shared modules or company types, then dry-run each domain pack: a small world of
    it built up to its tasks in a temporary folder (worldfactory/dryrun.py); --static skips the dry run."""
    from worldfactory.packs import check_files

    paths = [Path(f) for f in args.files]
    templates = Path(args.templates) if args.templates else None
    lines = check_files(paths, templates)
    notes: list[str] = []
    if not lines and not args.static:  # a pack that reads well is built, small, in a temporary folder
        from worldfactory.dryrun import dry_run_files

        found = dry_run_files(paths, templates)
        lines, notes = found.failures, found.notes
    for line in lines:
        print(printable(line))
    for line in notes:
        print(printable(f"note: {line}"))
    if lines:
        sys.stdout.flush()  # the problems first, whole lines, when both streams go to one terminal or file
        print(f"{len(lines)} problem(s) in {len(args.files)} file(s)", file=sys.stderr)
        return 2
    print(f"ok: {len(args.files)} file(s) valid" + (f"; {len(notes)} note(s) to look at" if notes else ""))
    return 0


def cmd_pack_schema(args: argparse.Namespace) -> int:
    from worldfactory.packs import pack_schema

    print(json.dumps(pack_schema(args.kind), indent=1, sort_keys=True))
    return 0


def cmd_seeds(args: argparse.Namespace) -> int:
    from worldfactory.seeds import seed_types
    from worldfactory.templates import load_templates

    ts = load_templates()
    if args.json:
        print(json.dumps({"seed_types": seed_types(ts), "variants": ts.catalog.variants,
                          "examples": ts.catalog.examples}, indent=1))
        return 0
    title = f"{len(seed_types(ts))} seed types x {ts.catalog.variants} variants"
    header = ("seed type", "domain", "company type", "example world ID")
    rows = [(s, ts.domains[s.split(".")[0]].title, ts.company_types[s.split(".")[1]].title, f"{s}--v001")
            for s in seed_types(ts)]
    console = Console()
    table = Table(title=title)
    for col in header:  # IDs are never cut or wrapped; the titles wrap
        table.add_column(col, no_wrap=col in ("seed type", "example world ID"))
    for row in rows:
        table.add_row(*row)
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    if sys.stdout.isatty() and natural <= console.width:
        console.print(table)
        return 0
    # Piped, or a terminal too narrow for the whole table: aligned plain lines, every ID whole
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(title)
    for row in [header, *rows]:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return 0


def templates_root() -> str | None:
    return os.environ.get("WORLDFACTORY_TEMPLATES") or None


def _root(args: argparse.Namespace) -> Path:
    return data_root(getattr(args, "data", None))


def _model_settings(args: argparse.Namespace) -> None:
    """--base-url, --model, --offline: set for this process, so its Dagster runs and workers draft alike."""
    from worldfactory.drafting import config

    for value, name in ((args.base_url, config.ENV_BASE_URL), (args.model, config.ENV_MODEL),
                        ("1" if args.offline else None, config.ENV_OFFLINE)):
        if value:
            os.environ[name] = value


def cmd_build(args: argparse.Namespace) -> int:
    from worldfactory.briefs import check_world_id
    from worldfactory.templates import load_templates

    _model_settings(args)
    ts = load_templates(templates_root())
    root = _root(args)
    wanted: list[str] = []
    if args.all:  # what the Dagster sensor registers: a backfill of the whole registry from the command line
        from worldfactory.registry import wanted_worlds

        wanted, errors = wanted_worlds(ts, root)
        for line in errors:
            ERR.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
        if errors:
            return 2
    ids = list(dict.fromkeys(list(args.world_ids) + (ts.catalog.examples if args.examples else []) + wanted))
    if not ids:
        ERR.print("error: name at least one world ID, or pass --examples or --all (see `worldfactory seeds`; "
                  "--all builds what world_templates/registry.yaml and data/briefs/ ask for)")
        return 2
    for wid in ids:
        check_world_id(wid, ts, root / "briefs")  # fail fast on a bad ID or brief file, before any work starts
    if args.no_dagster:  # the draft step first, where a text brief has no proven draft (Dagster: pack_draft)
        _draft_first(ids, root, ts)
    from worldfactory import boundary, confine

    # before any work: which boundary generated code runs under (none can start: one message saying what to do)
    ERR.print(f"generated code runs under: {boundary.describe(confine.boundary_name())}", markup=False,
              highlight=False, soft_wrap=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=ERR, transient=False)
    with progress:
        bar = progress.add_task("building", total=len(ids) * len(STAGES))
        started: set[tuple[str, str]] = set()
        done: set[str] = set()

        def moved(description: str) -> None:
            count = len(done) * len(STAGES) + sum(1 for w, _ in started if w not in done)
            progress.update(bar, completed=min(count, len(ids) * len(STAGES)), description=description)

        def on_stage(wid: str, stage: str) -> None:
            started.add((wid, stage))
            moved(f"{wid}: {stage}")

        def on_done(wid: str, ok: bool) -> None:
            done.add(wid)
            moved(f"{wid}: {'done' if ok else 'FAILED'}")

        try:
            with _sigterm_interrupts():
                if args.no_dagster:
                    results, failures = _build_engine(ids, root, ts, args.force, on_stage, on_done, args.jobs)
                else:
                    results, failures = _build_dagster(ids, root, args.force, args.batch, on_stage, on_done,
                                                       args.jobs)
        except KeyboardInterrupt:
            progress.stop()
            ERR.print("error: the build was stopped; its Dagster runs in progress are marked failed and its half-made "
                      "files removed (nothing half-built is published). Build again to finish.",
                      markup=False, highlight=False, soft_wrap=True)
            return 130
    _print_results(results, args.json)
    for wid, why in failures:
        ERR.print(f"error: {wid} was not built: {why}", markup=False, highlight=False, soft_wrap=True)
        if (root / "worlds" / wid / "world.json").is_file():
            ERR.print(f"error: {wid}: the last build FAILED; the bundle published before stays in "
                      f"{root / 'worlds' / wid} unchanged (the catalog's failed_builds table marks the attempt)",
                      markup=False, highlight=False, soft_wrap=True)
    if failures and not args.no_dagster:
        ERR.print("Each failed run is in the Dagster UI with its checks and logs: `worldfactory ui`.")
    return 1 if failures else 0


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops a build as Ctrl-C does (KeyboardInterrupt), so the runner can mark its runs failed and
    remove its scratch files; by default it would end the process on the spot and leave runs STARTED."""
    import signal

    def stop(_signo: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _engine_worker(task: tuple[str, str, str, bool]) -> Any:
    """In a --jobs worker process: build one world with the engine alone, reporting each stage."""
    from worldfactory.parallel import emit
    from worldfactory.stages.pipeline import build_world
    from worldfactory.templates import load_templates

    wid, root, templates, force = task
    return build_world(wid, Path(root), load_templates(templates or None), force=force,
                       progress=lambda stage: emit(wid, stage))


def _build_engine(ids: list[str], root: Path, ts: Any, force: bool, on_stage: Any, on_done: Any,
                  jobs: int = 1) -> tuple[list, list]:
    from worldfactory.stages.core import StageError, inputs_fingerprint
    from worldfactory.stages.pipeline import build_world, is_up_to_date

    results: dict[str, Any] = {}
    failures = []
    todo = ids if force else [w for w in ids if not is_up_to_date(root / "worlds" / w,
                                                                  inputs_fingerprint(ts, w, root / "briefs"))]
    if jobs > 1 and len(todo) > 1:
        from worldfactory.parallel import run_in_processes

        for wid in ids:
            if wid not in todo:  # up to date: answered here, no worker needed
                results[wid] = build_world(wid, root, ts)
                on_done(wid, True)

        def collected(task: tuple[str, str, str, bool], result: Any, error: BaseException | None) -> None:
            wid = task[0]
            if isinstance(error, StageError):
                failures.append((wid, str(error)))
            elif error is not None:
                raise error
            else:
                results[wid] = result
            on_done(wid, error is None)

        run_in_processes(_engine_worker, [(wid, str(root), templates_root() or "", force) for wid in todo], jobs,
                         on_result=collected, on_event=on_stage)
        return [results[w] for w in ids if w in results], sorted(failures, key=lambda f: ids.index(f[0]))
    for wid in ids:
        try:
            results[wid] = build_world(wid, root, ts, force=force, progress=lambda st, w=wid: on_stage(w, st))
            on_done(wid, True)
        except StageError as exc:
            failures.append((wid, str(exc)))
            on_done(wid, False)
    return list(results.values()), failures


def _build_dagster(ids: list[str], root: Path, force: bool, batch: int, on_stage: Any,
                   on_done: Any, jobs: int = 1) -> tuple[list, list]:
    from worldfactory.stages.pipeline import up_to_date_result
    from worldfactory_dagster.pipelines.runner import build_worlds, world_store

    outcomes = build_worlds(ids, world_store(root, templates_root()), force=force, batch=batch, jobs=jobs,
                            on_stage=on_stage, on_done=lambda o: on_done(o.world_id, o.ok))
    results, failures = [], []
    for o in outcomes:
        if o.ok:
            r = up_to_date_result(o.world_id, root / "worlds" / o.world_id, 0.0)
            results.append(r.model_copy(update={"skipped": o.skipped, "run_id": o.run_id, "seconds": o.seconds}))
        else:
            failures.append((o.world_id, o.failure))
    return results, failures


def _print_results(results: list[Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps([r.model_dump() for r in results], indent=1))
        return
    table = Table(title="worlds")
    table.add_column("world", no_wrap=True)
    for col in ("tables", "rows", "tools", "tasks", "curated", "oracle", "null", "build"):
        table.add_column(col, no_wrap=True)
    for r in results:
        v = r.verification
        c = r.counts
        table.add_row(r.world_id, str(c["tables"]), str(c["rows"]), str(c["tools"]), str(c["tasks"]),
                      str(c.get("curated_tasks", "")), f"{v['oracle_pass']}/{v['tasks']}",
                      f"{v['null_pass']}/{v['tasks']}",
                      "cached" if r.skipped else (f"run {r.run_id[:8]}" if r.run_id else f"{r.seconds:.1f}s"))
    out_console().print(table)
    out_console().print("curated: tasks in the pass band (0 < pass rate < 1 over the build's rollouts). "
                        "oracle: tasks whose oracle plan passes its verifier; null: tasks that doing nothing passes "
                        "(must be 0). cached: already up to date. run: the Dagster run that built it "
                        "(`worldfactory ui` shows it).")


def _draft_first(ids: list[str], root: Path, ts: Any) -> None:
    """Run the draft step for the text briefs among `ids` with no proven draft recorded (once per brief file)."""
    from worldfactory.briefs import model_from_env
    from worldfactory.drafting.step import draft_brief, draft_needed

    model = model_from_env()
    for path in dict.fromkeys(p for w in ids if (p := draft_needed(w, root / "briefs", model))):
        _report_draft(draft_brief(path, ts), as_json=False)


def _report_draft(result: Any, as_json: bool) -> dict[str, Any]:
    """One line on stderr (or the returned summary, for --json): the draft's folder, cost and corrections."""
    rec, spend = result.draft.record, result.spend
    summary = {"brief": str(result.brief_file), "draft": str(result.draft.folder), "proven": result.proven,
               "reused": result.reused, "model": rec.model, "attempts": len(rec.attempts),
               "corrections": dict(sorted(rec.corrections.items())), "llm_prompt_tokens": rec.prompt_tokens,
               "llm_completion_tokens": rec.completion_tokens, "cost_usd": rec.cost_usd,
               "spent": {"llm_prompt_tokens": spend.prompt_tokens, "llm_completion_tokens": spend.completion_tokens,
                         "cost_usd": spend.cost_usd, "model_requests": spend.requests - spend.cached,
                         "cached_replies": spend.cached},
               "error": rec.error}
    if not as_json:
        how = "reused" if result.reused else ("proven" if result.proven else "FAILED")
        ERR.print(f"draft of {result.brief_file.name} by {rec.model}: {how}, {len(rec.attempts)} replies, "
                  f"{sum(rec.corrections.values())} corrections, {rec.prompt_tokens + rec.completion_tokens} tokens, "
                  f"${rec.cost_usd:.4f} (this run paid ${spend.cost_usd:.4f}): {result.draft.folder}"
                  + (f"\nerror: {rec.error}" if rec.error else ""), markup=False, highlight=False, soft_wrap=True)
    return summary


def cmd_draft(args: argparse.Namespace) -> int:
    """The draft step alone: draft (or reuse) a text brief's pack, prove it with the pipeline, record it."""
    from worldfactory.drafting.step import brief_file_of, draft_brief
    from worldfactory.templates import load_templates

    _model_settings(args)
    ts = load_templates(templates_root())
    results = [draft_brief(brief_file_of(name, _root(args) / "briefs"), ts, force=args.force) for name in args.briefs]
    summaries = [_report_draft(r, args.json) for r in results]
    if args.json:
        print(json.dumps(summaries, indent=1))
    return 0 if all(r.proven for r in results) else 1


def cmd_brief_new(args: argparse.Namespace) -> int:
    from worldfactory.briefs import write_text_brief
    from worldfactory.templates import load_templates

    text = args.text if args.text is not None else Path(args.text_file).read_text(encoding="utf-8")
    head = {"company_type": args.company_type, "company_name": args.company_name,
            "variants": args.variants if args.variants != 1 else None}
    path = write_text_brief(_root(args) / "briefs", args.slug, text, load_templates(templates_root()), head)
    print(f"{path}: world brief.{args.slug}--v001 (draft its pack with a model, then build: worldfactory draft "
          f"brief.{args.slug}--v001 --base-url URL --model M; `worldfactory build` drafts first when needed)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    path = resolve_world(args.world, _root(args))
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


def rollout_config(args: argparse.Namespace, k: int = 1) -> RolloutConfig:
    from worldfactory.rollouts import RolloutConfig

    return RolloutConfig(policy=args.policy, k=k, error_rate=args.error_rate, base_url=args.base_url or "",
                         model=args.model or "", api_key=os.environ.get(args.api_key_env, "unused"),
                         concurrency=getattr(args, "concurrency", 32), max_turns=args.max_turns,
                         price_in_per_mtok=args.price_in, price_out_per_mtok=args.price_out)


def _open_world(args: argparse.Namespace, ref: str) -> Any:
    """The world, its generated code confined (see worldfactory.confine); its files checked unless --no-verify."""
    from worldfactory import confine

    return confine.open_world(resolve_world(ref, _root(args)), verify=not getattr(args, "no_verify", False))


def cmd_run(args: argparse.Namespace) -> int:
    from worldfactory.policies.base import run_policy

    world = _open_world(args, args.world)
    world.task(args.task_id)
    if args.policy == "openai":
        import asyncio

        from worldfactory.policies.openai_agent import ChatAgent

        async def play() -> Any:
            agent = ChatAgent(world, rollout_config(args))
            try:
                return await agent.run(args.task_id, args.seed)
            finally:
                await agent.close()

        result = asyncio.run(play())
    else:
        result = run_policy(world, args.task_id, args.policy, seed=args.seed, error_rate=args.error_rate)
    if args.trace:
        from worldfactory.runtime.trace import write_trace

        write_trace(Path(args.trace), world, result.trace, args.task_id, args.policy, result.answer)
    if args.json:
        out = {"world_id": result.world_id, "task_id": result.task_id, "policy": result.policy,
               "passed": result.verdict.passed, "reward": result.verdict.reward, "steps": result.steps,
               "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
               "cost_usd": result.cost_usd,
               "answer": result.answer, "mismatches": [m.model_dump() for m in result.verdict.mismatches],
               "trace": [s.model_dump() for s in result.trace]}
        print(json.dumps(out, indent=1, default=str))
        return 0
    console = out_console()
    console.print(f"[bold]{args.task_id}[/bold]: {world.task(args.task_id).instruction}")
    if args.steps:
        for s in result.trace:
            mark = "[green]ok[/green]" if s.ok else f"[red]error[/red] {s.error}"
            console.print(f"  {s.index:>4} {s.tool}({json.dumps(s.args)}) {mark}")
    else:  # a task can take 1,000 calls: a count here; --steps lists them, --trace records them
        errors = sum(not s.ok for s in result.trace)
        console.print(f"  {len(result.trace)} tool call(s), {errors} error(s)"
                      + (f"; trace in {args.trace} (`worldfactory replay {args.trace}`)" if args.trace
                         else "; --steps lists them"))
    if result.answer is not None:
        console.print(f"  answer: {result.answer}")
    verdict = "[green]PASSED[/green]" if result.verdict.passed else "[red]FAILED[/red]"
    console.print(f"{verdict} reward={result.verdict.reward} steps={result.steps}")
    for m in result.verdict.mismatches[:20]:
        console.print(f"  mismatch {m.table}[{m.key}].{m.column}: expected {m.expected!r}, got {m.got!r}")
    return 0


def cmd_rollouts(args: argparse.Namespace) -> int:
    """k episodes per task as an evaluation run of its own (worldfactory.evals.runs): the build's rows and
    other runs' are never touched, and running it again resumes or reuses the run."""
    from worldfactory.cli_eval import play_run
    from worldfactory.evals.runs import run_episodes
    from worldfactory.rollouts import Rollout, curate, histogram, pass_rates

    bundle = resolve_world(args.world, _root(args))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=ERR, transient=False) as progress:
        bar = progress.add_task(f"{bundle.name}: {args.policy}", total=None)
        info = play_run(args, [bundle], args.k, on_done=lambda n: progress.advance(bar, n))
    episodes = run_episodes(_root(args), info.run_id)
    rates = pass_rates([Rollout.model_validate({**e, "trace": []}) for e in episodes])
    kept = curate(rates, {e["task_id"]: e["family"] for e in episodes})
    summary = {"world_id": next(iter(info.config.worlds)), "run_id": info.run_id, "policy": info.config.label,
               "k": info.config.k, "episodes": len(episodes), "steps": sum(e["steps"] for e in episodes),
               "histogram": histogram(rates), "kept": len(kept), "dropped": len(rates) - len(kept),
               "prompt_tokens": sum(e["prompt_tokens"] for e in episodes),
               "completion_tokens": sum(e["completion_tokens"] for e in episodes),
               "cost_usd": round(sum(e["cost_usd"] for e in episodes), 6), "curated": kept}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    console = out_console()
    console.print(f"run {info.run_id}: {summary['episodes']} episodes, {summary['steps']} steps; pass-rate "
                  "histogram: " + ", ".join(f"{b}: {n}" for b, n in summary["histogram"].items()))
    console.print(f"kept {summary['kept']} tasks in the pass band (0 < pass rate < 1), dropped {summary['dropped']}; "
                  f"tokens {summary['prompt_tokens']} in / {summary['completion_tokens']} out, "
                  f"${summary['cost_usd']:.4f}. Rows: the run's own (`worldfactory eval show {info.run_id}`).")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from worldfactory.runtime.trace import read_trace, replay

    header, steps = read_trace(Path(args.trace))
    world = _open_world(args, args.world or header.world_id)
    report = replay(world, header, steps)
    if args.json:
        print(json.dumps({"world_id": report.world_id, "task_id": report.task_id, "identical": report.identical,
                          "reward": report.reward, "steps": [{**s.model_dump(), "identical": s.identical}
                                                             for s in report.steps]}, indent=1))
        return 0 if report.identical else 1
    console = out_console()
    differ = [s for s in report.steps if not s.identical]
    shown = report.steps if args.all else (differ or report.steps[:5] + report.steps[-5:])
    table = Table(title=f"replay of {len(report.steps)} steps on {report.world_id}")
    for col in ("step", "tool", "recorded", "replayed", "same"):
        table.add_column(col)
    for s in shown:
        table.add_row(str(s.index), s.tool, s.recorded[:12], s.replayed[:12], "yes" if s.identical else "NO")
    console.print(table)
    verdict = "identical at every step" if report.identical else f"{len(differ)} step(s) differ"
    console.print(f"{verdict}" + (f"; reward {report.reward}" if report.reward is not None else ""))
    return 0 if report.identical else 1


def cmd_serve(args: argparse.Namespace) -> int:
    """The server process is confined whole: re-executed under the OS boundary (HTTP gets a socket bound here)."""
    from worldfactory import confine

    path = resolve_world(args.world, _root(args))
    if args.openenv and args.transport != "http":
        ERR.print("error: serve: --openenv needs --transport http (OpenEnv's app is served over HTTP and WebSocket)")
        return 2
    options = _serve_options(args) if args.transport == "http" else None
    if args.transport == "http" and options is None:
        return 2
    if os.environ.get(confine.ENV_INSIDE) == "1":
        openenv = ("worldfactory.adapters.openenv_server",) if options is not None and options.openenv else ()
        confine.harden(preload=(*confine.SERVE_MODULES, *openenv))
    elif confine.confined_here():
        return _serve_confined(args, path, options)
    if options is not None and options.openenv:  # the app is handed to the server: the runtime imports no app
        from worldfactory.adapters.openenv_server import create_openenv_app
        from worldfactory.runtime.control import register_mount

        register_mount("openenv", create_openenv_app)
    from worldfactory.runtime.control import serve
    from worldfactory.runtime.world import World

    world = World.open(path, verify=not args.no_verify)
    token = None
    if args.token_fd is not None:  # the confined server reads the token its parent chose (never in argv or env)
        with os.fdopen(args.token_fd, "rb") as f:
            token = f.read().decode().strip()
    elif args.transport == "http":
        from worldfactory.runtime.control import control_token

        token = control_token(lambda t: ERR.print(f"control plane token: {t}", markup=False, highlight=False))
    if options is not None and args.listen_fd is None:
        ERR.print(_serving_line(world.world_id, args.port, options), markup=False, highlight=False)
    if args.task is not None:  # stdio: one episode of this task (its requester, if any, is a tool)
        if args.transport != "stdio":
            ERR.print("error: serve: --task is for stdio; over HTTP the control plane starts episodes for tasks",
                      markup=False, highlight=False)
            return 2
        world.task(args.task)
    serve(world, args.transport, args.port, fd=args.listen_fd, token=token, options=options, task_id=args.task)
    return 0


def _serve_options(args: argparse.Namespace) -> Any:
    """The HTTP server's ServeOptions from the flags (the confined server gets them whole, as JSON)."""
    from pydantic import ValidationError

    from worldfactory.runtime.control import ENV_ALLOWED_HOSTS, ServeOptions

    if args.serve_options is not None:
        return ServeOptions.model_validate_json(args.serve_options)
    hosts = args.allowed_host if args.allowed_host is not None else [
        h for h in os.environ.get(ENV_ALLOWED_HOSTS, "").split(",") if h.strip()]
    try:
        return ServeOptions(host=args.host, idle_seconds=args.idle_timeout, free_idle_seconds=args.mcp_idle_timeout,
                            max_sessions=args.max_sessions, max_free_sessions=args.max_free_sessions,
                            max_connections=args.max_connections, allowed_hosts=tuple(hosts),
                            allowed_origins=tuple(args.allowed_origin or ()), mcp_auth=args.mcp_auth,
                            openenv=args.openenv)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"])
            ERR.print(f"error: serve: {(where + ': ') if where else ''}{err['msg'].removeprefix('Value error, ')}",
                      markup=False, highlight=False, soft_wrap=True)
        return None


def _serving_line(name: str, port: int, options: Any) -> str:
    return (f"serving {name} over streamable HTTP at http://{options.host}:{port}/mcp "
            f"({'token required' if options.mcp_needs_token else 'open'}; control plane at /control; idle "
            f"episodes expire after {options.idle_seconds:g} s, free-form /mcp sessions after "
            f"{options.free_idle_seconds:g} s)"
            + (f"; OpenEnv's app at http://{options.host}:{port}/ (/ws, /reset, /step, /metadata)"
               if options.openenv else ""))


def _serve_confined(args: argparse.Namespace, path: Path, options: Any) -> int:
    import socket

    from worldfactory import confine

    argv = ["serve", str(path.resolve()), "--transport", args.transport] + (["--no-verify"] if args.no_verify else [])
    if args.task is not None:
        argv += ["--task", args.task]
    if args.transport != "http":
        return confine.exec_confined(argv)
    from worldfactory.runtime.control import control_token

    token = control_token(lambda t: ERR.print(f"control plane token: {t}", markup=False, highlight=False))
    sock = socket.create_server((args.host, args.port), reuse_port=False, backlog=2048)
    # Accepted connections inherit TCP_NODELAY from the listener (Linux). The confined server must get it
    # here: uvicorn takes an inherited fd for a Unix socket, so asyncio never sets it, and Nagle's
    # algorithm against delayed ACKs then costs 40 ms a response.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    read_end, write_end = os.pipe()  # the token goes in through a pipe: never in argv, and the env is cleared
    try:
        os.write(write_end, token.encode())
        os.close(write_end)
        ERR.print(_serving_line(path.name, args.port, options), markup=False, highlight=False)
        argv += ["--host", args.host, "--port", str(args.port), "--listen-fd", str(sock.fileno()),
                 "--token-fd", str(read_end), "--serve-options", options.model_dump_json()]
        return confine.exec_confined(argv, pass_fds=(sock.fileno(), read_end), open_files=confine.SERVE_OPEN_FILES)
    finally:
        sock.close()
        os.close(read_end)


def cmd_image(args: argparse.Namespace) -> int:
    """Build each world's container image (see worldfactory.images); --probe also runs and checks it."""
    from worldfactory.images import ImageError
    from worldfactory.images.probe import probe_image
    from worldfactory.images.world import build_world_image

    if args.runtime:  # the shared runtime image, which is also the Dagster code image (deploy/)
        from worldfactory.images import connect
        from worldfactory.images.runtime import ensure_runtime

        try:
            ref, built = ensure_runtime(connect())
        except ImageError as exc:
            ERR.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            return 2
        print(json.dumps({"image": ref, "built": built}) if args.json else ref)
        return 0
    refs = list(args.worlds)
    if args.examples:
        from worldfactory.templates import load_templates

        refs += [w for w in load_templates(templates_root()).catalog.examples if w not in refs]
    if not refs:
        ERR.print("error: name at least one world, or pass --examples")
        return 2
    failed = 0
    for ref in refs:
        path = resolve_world(ref, _root(args))
        try:
            built = build_world_image(path, force=args.force, openenv=args.openenv,
                                      log=(lambda line: ERR.print(line, markup=False, highlight=False))
                                      if args.verbose else None)
            out: dict[str, Any] = built.model_dump(exclude={"labels"})
            if args.probe:
                probe = probe_image(built.image, path)
                out["probe"] = probe.model_dump()
                failed += not probe.passed
        except ImageError as exc:
            ERR.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            return 2
        if args.json:
            print(json.dumps(out, sort_keys=True), flush=True)
        else:
            print(built.image, flush=True)
            if args.probe and not out["probe"]["passed"]:
                ERR.print(f"{built.world_id}: probe failed at {out['probe']['step']}: {out['probe']['reason']}",
                          markup=False, highlight=False, soft_wrap=True)
    return 1 if failed else 0


def cmd_query(args: argparse.Namespace) -> int:
    from worldfactory.catalog import query

    columns, rows = query(_root(args), args.sql)
    if args.format == "json":
        print(json.dumps([dict(zip(columns, row, strict=True)) for row in rows], indent=1, default=str))
        return 0
    if args.format == "csv":  # a header line, then one line per row: for pipes and spreadsheets
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(["" if v is None else v for v in row] for row in rows)
        return 0
    table = Table(show_lines=False)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    out_console().print(table)
    out_console().print(f"{len(rows)} row(s)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Curated tasks of built worlds as a Hugging Face dataset (the `trainers` extra)."""
    from worldfactory.adapters.hf_dataset import export_rows, world_rows, write_dataset
    from worldfactory.runtime.world import WorldError

    root = _root(args)
    if args.worlds:
        bundles = [resolve_world(w, root) for w in args.worlds]
    else:
        bundles = sorted(p.parent for p in (root / "worlds").glob("*/world.json"))
        if not bundles:
            raise WorldError(f"no built worlds under {root / 'worlds'}; build some with `worldfactory build`")
    if args.run:  # that run's band: its policy's curriculum, on the worlds it played
        from worldfactory.cli_eval import run_bands

        bundles, bands = run_bands(root, args.run, bundles if args.worlds else None)
    worlds = world_rows(bundles)  # tools.json and the pass band first: a bundle without them is named first
    rows = export_rows(bundles, all_tasks=args.all_tasks, bands=bands if args.run else None)
    try:
        import datasets
    except ImportError:
        ERR.print('error: `worldfactory export` needs the trainers extra: pip install -e ".[trainers]"')
        return 2
    datasets.disable_progress_bars()
    target = write_dataset(rows, Path(args.out), args.format, worlds=worlds, split_by=args.split_by,
                           license=args.license, band_run=args.run)
    n_worlds = len({r["world_id"] for r in rows})
    print(f"wrote {len(rows)} task(s) of {n_worlds} world(s) to {target} ({args.format}; splits held out by "
          f"{args.split_by}; card {target / 'README.md'})")
    return 0


def cmd_page(args: argparse.Namespace) -> int:
    from worldfactory.generate.page import bundle_page

    bundle = resolve_world(args.world, _root(args))
    page = bundle_page(bundle, [s.name for s in STAGES])
    from worldfactory.evals.summary import summaries

    wid = json.loads((bundle / "world.json").read_text())["world_id"]
    found = summaries(_root(args), wid)
    if found:  # the runs that played it, as on the catalog site (the bundle's own index.html never changes)
        from worldfactory.evals.pages import runs_section, with_runs

        page = with_runs(page, runs_section(found, wid, prefix="../"))
    page = page.encode()
    if args.out:
        Path(args.out).write_bytes(page)
        print(f"wrote {args.out} ({len(page)} bytes)")
    else:
        sys.stdout.buffer.write(page)
    return 0


def cmd_site(args: argparse.Namespace) -> int:
    from worldfactory.site import export, make_server

    root = _root(args)
    if args.out:
        written = export(root, Path(args.out))
        print(f"wrote {len(written)} files under {args.out} (open {Path(args.out) / 'index.html'})")
        return 0
    server = make_server(root, args.host, args.port)
    ERR.print(f"catalog site on http://{args.host}:{server.server_address[1]}/ (data: {root}; Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from worldfactory.seeds import SeedError, check_world_id

    check_world_id(args.world_id)
    from worldfactory_dagster.pipelines.runner import delete_world, world_store  # Dagster: only once the ID is one

    root = _root(args)
    removed = delete_world(args.world_id, world_store(root, templates_root()))
    if not removed:
        raise SeedError(f"no world '{args.world_id}' to delete: nothing under {root} and no Dagster partition "
                        f"by that name")
    for item in removed:
        print(f"removed {item}")
    print(f"{args.world_id} will not be registered again until you build it by name "
          f"(`worldfactory build {args.world_id}`).")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from worldfactory_dagster.pipelines.runner import dagster_home, workspace_file

    env = dict(os.environ, DAGSTER_HOME=str(dagster_home()), WORLDFACTORY_DATA=str(_root(args).resolve()))
    # `dagster dev`, without its API-stability warnings (pipelines/__main__.py)
    cmd = [sys.executable, "-m", "worldfactory_dagster.pipelines", "dev", "-w", str(workspace_file()),
           "-h", args.host, "-p", str(args.port)]
    ERR.print(f"Dagster UI on http://{args.host}:{args.port} (webserver and daemon; Ctrl-C stops both). "
              f"Instance: {env['DAGSTER_HOME']}; data: {env['WORLDFACTORY_DATA']}")
    return run_process_group(cmd, env=env, cwd=str(workspace_file().parent))


def run_process_group(cmd: list[str], env: dict[str, str], cwd: str, grace: float = 20.0) -> int:
    """Run cmd in a process group of its own and leave nothing of it behind.

    SIGINT or SIGTERM here asks its leader to stop (SIGINT: `dagster dev` then stops the webserver,
    daemon and code servers it started); after `grace` seconds, or once the leader is gone, whatever
    is left of the group is killed. Without the group, a killed wrapper left the webserver answering.
    """
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True)
    asked: list[float] = []

    def stop(signum: int, frame: Any) -> None:
        asked.append(time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if asked and time.monotonic() - asked[0] > grace:
                    proc.kill()
    finally:
        _end_group(proc.pid, grace=5.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if asked else code


def _end_group(pgid: int, grace: float) -> None:
    """SIGTERM every process left in the group, then SIGKILL those still there after `grace` seconds."""
    import signal
    import time

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.1)


def group_alive(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, read from /proc."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


DATA_HELP = "data root: worlds are found under DATA/worlds (default $WORLDFACTORY_DATA, else data/)"


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", help="OpenAI-compatible server that drafts free-text briefs' packs "
                                      "(default $OPENAI_BASE_URL; key: $OPENAI_API_KEY)")
    p.add_argument("--model", help="the model that drafts them (default $WORLDFACTORY_LLM_MODEL)")
    p.add_argument("--offline", action="store_true", help="never call a model: cached replies only")


def _data_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help=DATA_HELP)


def _policy_args(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--policy", default=default, choices=["oracle", "null", "random", "noisy", "openai"],
                   help="who acts: the task's oracle plan, nobody, random calls, the oracle with errors, or a model")
    p.add_argument("--error-rate", type=float, default=0.1, help="noisy policy: chance each step goes wrong")
    p.add_argument("--base-url", help="openai policy: an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", help="openai policy: the model name the server serves")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument("--max-turns", type=int, default=40)
    p.add_argument("--price-in", type=float, default=0.0, help="USD per million prompt tokens (cost ledger)")
    p.add_argument("--price-out", type=float, default=0.0, help="USD per million completion tokens")


def _sandbox_args(p: argparse.ArgumentParser, verify: bool = True) -> None:
    p.add_argument("--unconfined", action="store_true",
                   help="run generated tool code without the OS sandbox (development only; also "
                        "WORLDFACTORY_UNCONFINED=1)")
    if verify:
        p.add_argument("--no-verify", action="store_true",
                       help="open the bundle even if its files differ from world.json (development only)")


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help gives every option's default, an option without help text too; never None or a flag's False."""

    @staticmethod
    def _has_default(action: argparse.Action) -> bool:
        return bool(action.option_strings) and all(action.default is not v for v in (None, False, argparse.SUPPRESS))

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._has_default(action):
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not self._has_default(action) or "%(default)" in text or "(default" in text:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: subparsers are made of the parent's class, so all get the formatter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="worldfactory", description="Build, serve and grade tool-use worlds.")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("seeds", help="list the seed types of the catalog")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_seeds)

    cp = sub.add_parser("check-pack", help="validate template files (domain packs, modules, company types), then "
                                           "dry-run each domain pack")
    cp.add_argument("files", nargs="+", metavar="FILE")
    cp.add_argument("--templates", help="the templates folder the files are checked against (default: the "
                                         "folder each file sits in, else world_templates/)")
    cp.add_argument("--static", action="store_true", help="check the files only; skip the dry run (a small world "
                                                           "of each domain pack built up to its tasks in a temporary "
                                                           "folder)")
    cp.set_defaults(fn=cmd_check_pack)

    ps = sub.add_parser("pack-schema", help="print the JSON Schema of the template file format")
    ps.add_argument("--kind", choices=["domain", "module", "company-type"],
                    help="one kind of file (default: any of the three)")
    ps.set_defaults(fn=cmd_pack_schema)

    b = sub.add_parser("build", help="build and verify worlds")
    b.add_argument("world_ids", nargs="*", metavar="WORLD_ID")
    b.add_argument("--examples", action="store_true", help="also build the catalog's example worlds")
    b.add_argument("--all", action="store_true",
                   help="also build every world the registry wants (world_templates/registry.yaml, brief files)")
    b.add_argument("--data", help="data root (default $WORLDFACTORY_DATA or data/): bundles go to DATA/worlds")
    b.add_argument("--force", action="store_true", help="rebuild even when up to date")
    b.add_argument("--batch", type=int, default=WORLDS_PER_RUN, metavar="N",
                   help="build up to N worlds per Dagster run (1: a run per world). "
                        "Fewer runs cost less; a failed batch is rebuilt one world per run")
    b.add_argument("--jobs", "-j", type=int, default=default_jobs(), metavar="N",
                   help="build up to N worlds at once, each in its own process (default: the number of cores, "
                        "%(default)s here)")
    b.add_argument("--no-dagster", action="store_true",
                   help="engine only: build without recording runs in Dagster (same bytes)")
    b.add_argument("--json", action="store_true")
    _model_args(b)
    _sandbox_args(b, verify=False)
    b.set_defaults(fn=cmd_build)

    dr = sub.add_parser("draft", help="the draft step: a model drafts a free-text brief's domain pack, the pipeline "
                                      "proves it, and data/drafts/ records it with its cost and corrections")
    dr.add_argument("briefs", nargs="+", metavar="BRIEF", help="a world ID brief.SLUG--v001, a slug, or a .md path")
    dr.add_argument("--force", action="store_true", help="draft again even when a proven draft is recorded")
    dr.add_argument("--json", action="store_true")
    _model_args(dr)
    _data_arg(dr)
    dr.set_defaults(fn=cmd_draft)

    br = sub.add_parser("brief", help="free-text briefs: a model drafts their domain pack (`draft`, or when built)")
    brs = br.add_subparsers(dest="brief_command", required=True)
    bn = brs.add_parser("new", help="write data/briefs/SLUG.md (world brief.SLUG--v001)")
    bn.add_argument("slug", metavar="SLUG")
    src = bn.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the description of the business")
    src.add_argument("--text-file", metavar="FILE", help="read the description from a file")
    bn.add_argument("--company-type", help="a company type of the templates (default: the catalog's first)")
    bn.add_argument("--company-name", help="the company's name (default: drawn from the generation seed)")
    bn.add_argument("--variants", type=int, default=1, help="how many worlds the sensor registers")
    _data_arg(bn)
    bn.set_defaults(fn=cmd_brief_new)

    sh = sub.add_parser("show", help="summarise a built world")
    sh.add_argument("world", metavar="WORLD")
    sh.add_argument("--json", action="store_true")
    sh.add_argument("--tasks", type=int, default=10, help="how many tasks to list")
    _data_arg(sh)
    sh.set_defaults(fn=cmd_show)

    r = sub.add_parser("run", help="run one task with a policy and grade it")
    r.add_argument("world", metavar="WORLD")
    r.add_argument("task_id", metavar="TASK_ID")
    _policy_args(r, default="oracle")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true")
    r.add_argument("--trace", metavar="PATH", help="write the episode as a JSONL trace (see `replay`)")
    r.add_argument("--steps", action="store_true", help="list every tool call (by default only their count)")
    _data_arg(r)
    _sandbox_args(r)
    r.set_defaults(fn=cmd_run)

    ro = sub.add_parser("rollouts", help="k episodes per task with a policy, as an evaluation run; pass rates and "
                                         "the pass band")
    ro.add_argument("world", metavar="WORLD")
    _policy_args(ro, default="noisy")
    from worldfactory.cli_eval import offer_weak

    offer_weak(ro)
    ro.add_argument("-k", type=int, default=8, help="rollouts per task")
    ro.add_argument("--tasks", help="comma-separated task IDs (default: every task)")
    ro.add_argument("--concurrency", type=int, default=32, help="episodes at once")
    ro.add_argument("--seed", type=int, default=0, help="0: the build's episode seeds; another draws others")
    ro.add_argument("--name", default="", help="the run id (default: the policy label and a configuration hash)")
    ro.add_argument("--data", help="data root for the catalogs and runs (default $WORLDFACTORY_DATA or data/)")
    ro.add_argument("--json", action="store_true")
    _sandbox_args(ro)
    ro.set_defaults(fn=cmd_rollouts)

    rp = sub.add_parser("replay", help="replay a recorded trace on fresh state, step by step")
    rp.add_argument("trace", metavar="TRACE.jsonl")
    rp.add_argument("--world", metavar="WORLD", help="bundle to replay on (default: the trace's world ID)")
    rp.add_argument("--all", action="store_true", help="list every step, not only differences")
    rp.add_argument("--json", action="store_true")
    _data_arg(rp)
    _sandbox_args(rp)
    rp.set_defaults(fn=cmd_replay)

    sv = sub.add_parser("serve", help="serve a world's tools over MCP")
    sv.add_argument("world", metavar="WORLD")
    sv.add_argument("--transport", default="stdio", choices=["stdio", "http"])
    sv.add_argument("--task", metavar="TASK_ID", help="stdio: serve one episode of this task (its instruction is "
                                                      "the harness's to give; ask_requester is listed if it has one)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=SERVE_PORT, help="http: the port (not 8000, where model servers "
                                                                  "such as vLLM listen)")
    _data_arg(sv)
    sv.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)  # the confined server's inherited socket
    sv.add_argument("--token-fd", type=int, help=argparse.SUPPRESS)  # and its control token, through a pipe
    sv.add_argument("--serve-options", help=argparse.SUPPRESS)  # the confined server's ServeOptions, as JSON
    sv.add_argument("--idle-timeout", type=float, default=24 * 3600.0, metavar="SECONDS",
                    help="http: a control-plane episode nobody used for this long expires (default 86400, 24 hours)")
    sv.add_argument("--mcp-idle-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="http: a free-form /mcp session nobody used for this long expires (default 600)")
    sv.add_argument("--max-sessions", type=int, metavar="N",
                    help="http: episodes held at once, free-form and control-plane together; past it a new one "
                         "gets 503 with Retry-After (default: what fits half the memory limit, at most 4096)")
    sv.add_argument("--max-free-sessions", type=int, metavar="N",
                    help="http: of those, free-form /mcp sessions (default: half of --max-sessions)")
    sv.add_argument("--max-connections", type=int, default=2048, metavar="N",
                    help="http: open connections at once; past it a request gets 503 (default 2048)")
    sv.add_argument("--allowed-host", action="append", metavar="NAME",
                    help="http: a host name clients reach the server by (repeatable; loopback names always work). "
                         "Required off loopback; default $WORLDFACTORY_ALLOWED_HOSTS (comma-separated); '*': any")
    sv.add_argument("--allowed-origin", action="append", metavar="ORIGIN",
                    help="http: a web origin (scheme://host[:port]) whose pages may call the server (repeatable); "
                         "requests with any other Origin get 403, requests with none (every non-browser client) pass")
    sv.add_argument("--mcp-auth", choices=["token", "open"],
                    help="http: whether /mcp needs the control token too (default: open on loopback, token off it)")
    sv.add_argument("--openenv", action="store_true",
                    help="http: also serve OpenEnv's app (/ws, /reset, /step, /state, /metadata, /health) on the same "
                         "port, for OpenEnv's clients (pip install -e '.[openenv]')")
    _sandbox_args(sv)
    sv.set_defaults(fn=cmd_serve)

    im = sub.add_parser("image", help="build a world's container image (MCP over HTTP on port 8000)")
    im.add_argument("worlds", nargs="*", metavar="WORLD", help="a world ID under data/worlds/ or a bundle folder")
    im.add_argument("--examples", action="store_true", help="also the catalog's example worlds (built already)")
    im.add_argument("--force", action="store_true", help="rebuild the world layer even if the image exists")
    im.add_argument("--probe", action="store_true",
                    help="then run the container and check it over MCP (tools, one task's oracle); exit 1 if not")
    im.add_argument("--runtime", action="store_true",
                    help="only the shared runtime image (also the Dagster code image of deploy/): its reference")
    im.add_argument("--openenv", action="store_true",
                    help="the OpenEnv target: OpenEnv's app beside MCP on port 8000 (tag <sha>-openenv), for "
                         "OpenEnv's from_docker_image")
    im.add_argument("--verbose", "-v", action="store_true", help="show the engine's build output")
    im.add_argument("--json", action="store_true", help="one JSON object per world (image, sizes, seconds...)")
    im.set_defaults(fn=cmd_image)

    q = sub.add_parser("query", help="read-only SQL over the catalogs (worlds, tasks, costs) with DuckDB")
    q.add_argument("sql", metavar="SQL")
    q.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (for reading), csv (a header, then a line per row) or json (an array of objects)")
    q.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    _data_arg(q)
    q.set_defaults(fn=cmd_query)

    ex = sub.add_parser("export", help="curated tasks as a Hugging Face dataset (needs the trainers extra)")
    ex.add_argument("worlds", nargs="*", metavar="WORLD", help="world IDs or bundle paths (default: every built world)")
    ex.add_argument("--out", required=True, help="folder to write: README.md (the dataset card), tasks/ (splits "
                                                 "train, validation, test) and tools/ (one row per world)")
    ex.add_argument("--format", choices=["disk", "parquet"], default="disk",
                    help="disk: datasets.load_from_disk(OUT/tasks); parquet: datasets.load_dataset(OUT, 'tasks')")
    ex.add_argument("--split-by", choices=["world", "domain"], default="world",
                    help="hold out whole worlds (default) or whole domains in validation and test")
    ex.add_argument("--license", default="other", help="the license the card declares (a Hub license id)")
    ex.add_argument("--all-tasks", action="store_true", help="every task the world serves, not only the curated ones")
    ex.add_argument("--run", help="an evaluation run's band (`worldfactory eval list`) instead of the build's")
    _data_arg(ex)
    ex.set_defaults(fn=cmd_export)

    pg = sub.add_parser("page", help="a world's web page (the bundle's index.html, rendered again)")
    pg.add_argument("world", metavar="WORLD")
    pg.add_argument("--out", help="write it to this file (default: stdout)")
    _data_arg(pg)
    pg.set_defaults(fn=cmd_page)

    st = sub.add_parser("site", help="the catalog site: every built world, filters and plots (loopback)")
    st.add_argument("--host", default="127.0.0.1")
    st.add_argument("--port", type=int, default=8080)
    st.add_argument("--out", help="write a static export to this folder instead of serving")
    _data_arg(st)
    st.set_defaults(fn=cmd_site)

    d = sub.add_parser("delete", help="remove a world's bundle, catalog rows and Dagster partition")
    d.add_argument("world_id", metavar="WORLD_ID")
    _data_arg(d)
    d.set_defaults(fn=cmd_delete)

    u = sub.add_parser("ui", help="start the Dagster webserver and daemon on loopback")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=3000)
    _data_arg(u)
    u.set_defaults(fn=cmd_ui)
    from worldfactory.cli_audit import add_parser as add_audit_parser
    from worldfactory.cli_eval import add_parser as add_eval_parser

    add_eval_parser(sub)
    add_audit_parser(sub)
    return p


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("worldfactory")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away (`worldfactory seeds | head -1`): stop quietly, as `cat` does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's flush of stdout does not raise again
        return 141  # 128 + SIGPIPE, what a shell reports for a command a pipe closed


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    from worldfactory.errors import USER_ERRORS

    if getattr(args, "unconfined", False):
        from worldfactory.confine import set_unconfined

        set_unconfined()

    try:
        return int(args.fn(args))
    except USER_ERRORS as exc:
        ERR.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())

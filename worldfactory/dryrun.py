"""`check-pack` as a dry run: build a small world of a domain pack in a temporary folder, stage by stage up
to its tasks, and say what went wrong as its author can act on it.

Every failure is one line naming the pack file and the field (the table, column or invariant the stage
names) with what to change. Then, as notes that do not fail the check: statuses no row can hold and
`from` statuses no row holds (pack_flow.py), and each step of the pack's own workflows that no task uses,
with the reason read off the seeded world (no row in its `from` statuses, guards that hold on none, a
clock that forbids it, kept out of bulk with nowhere else to go).
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from worldfactory.pack_flow import flow_lines
from worldfactory.spec import DomainPack, TableDef, Transition, WorldSpec
from worldfactory.templates import TemplateSet

UPTO = "world_tasks"  # the last stage a dry run makes and proves
ADVICE = {
    "world_schema": "fix the column types, refs and enums it names",
    "seed_database": "change that table's generators (gen ranges, `maximum`, enough choices for a unique "
                     "column, dates by their date_meaning) or its per_parent counts",
    "world_tools": "fix the workflow, guards or effects of that table",
    "world_tasks": "fix the transitions or create/update lists of that table so its oracles run",
}


@dataclass
class DryRun:
    """What a dry run found: failures (the check fails) and notes (it passes, the author should look)."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    world_id: str = ""
    tasks: int = 0


def _where(reason: str, pack: DomainPack, modules: list[str], templates: TemplateSet) -> tuple[str, str]:
    """(file, field) a stage's failure points at: an invariant's own field, else the table (and column) it
    names in the pack or in one of its modules, else the pack's tables."""
    field_of = re.search(r"\(field '([^']+)' of ([\w/.-]+)", reason) or re.search(r"\((modules|domains)/([\w.-]+)",
                                                                                  reason)
    if field_of and field_of.group(2).endswith(".yaml") and "'" not in field_of.group(1):
        return field_of.group(2), field_of.group(1)
    for name in re.findall(r"table '(\w+)'|\b(\w+) row \d+|\bINSERT INTO (\w+)|\bon (\w+)\.", reason):
        table = next((n for n in name if n), "")
        column = re.search(r"column '(\w+)'|\b" + table + r"\.(\w+)", reason)
        col = next((c for c in column.groups() if c), None) if column else None
        for i, t in enumerate(pack.tables):
            if t.name == table:
                return "", f"tables[{i}:{t.name}]" + _column(t, col)
        for m in modules:
            for i, t in enumerate(templates.modules[m].tables):
                if t.name == table:
                    return f"modules/{m}.yaml", f"tables[{i}:{t.name}]" + _column(t, col)
    return "", "tables"


def _column(t: TableDef, name: str | None) -> str:
    j = next((j for j, c in enumerate(t.columns) if c.name == name), None)
    return "" if j is None else f".columns[{j}:{name}]"


def _unused_reason(spec: WorldSpec, conn: sqlite3.Connection, t: TableDef, tr: Transition, tools: set[str],
                   reachable: set[str]) -> str:
    """Why no task of the dry-run world takes the step."""
    from worldfactory.generate.tasks.clock import clock_refusal
    from worldfactory.generate.workflow import guards_hold, with_related

    if tr.name not in tools:
        return "the world has no tool for it (its table is left out of this company type)"
    if not set(tr.from_) & reachable:
        return f"no row can hold its `from` statuses ({', '.join(tr.from_)})"
    assert t.workflow is not None
    marks = ", ".join("?" * len(tr.from_))
    cur = conn.execute(f"SELECT * FROM {t.name} WHERE {t.workflow.column} IN ({marks}) ORDER BY id", tr.from_)
    names = [d[0] for d in cur.description]
    rows = with_related(conn, {x.name: x for x in spec.tables}, t, [dict(zip(names, r, strict=True)) for r in cur])
    if not rows:
        return (f"no seeded row is in {' or '.join(tr.from_)}; give the status column's gen those statuses "
                f"(choice and weights) so tasks find records to act on")
    today = spec.brief.clock
    args = {p.name: rows[0].get(p.task_value[4:]) if p.task_value and p.task_value.startswith("row.") else None
            for p in tr.params}
    held = [r for r in rows if not tr.guards or guards_hold(tr, r, args, spec.brief.rules, today)]
    if tr.guards and not held:
        return f"its guards hold on none of the {len(rows)} rows in {' or '.join(tr.from_)}"
    allowed = [r for r in held if clock_refusal(t, tr, r, args, today) is None]
    if not allowed:
        why = clock_refusal(t, tr, held[0], args, today)
        return f"the clock forbids it on all {len(held)} rows it could take ({why[1] if why else ''})"
    flag = "; it is kept out of bulk (`bulk: false`)" if not tr.bulk else ""
    return f"no task family planned it ({len(allowed)} rows it could take){flag}"


def dry_run(path: Path, pack: DomainPack, templates: TemplateSet, company_type: str | None = None) -> DryRun:
    """Build a small world of the pack (the smallest company type, variant 1) up to its tasks, in a
    temporary folder that is removed after; each stage made and proved before the next."""
    from worldfactory.briefs import templates_with
    from worldfactory.drafts import pack_bytes
    from worldfactory.seeds import _expand
    from worldfactory.stages import STAGES
    from worldfactory.stages.brief import PACK
    from worldfactory.stages.core import BuildContext, WorkDir, run_make, run_prove

    out = DryRun()
    ts = templates_with(templates, pack)
    kind = company_type or min(ts.company_types, key=lambda n: (ts.company_types[n].scale, n))
    in_catalog = pack.name in ts.catalog.domains and kind in ts.catalog.company_types
    out.world_id = f"{pack.name}.{kind}--v001" if in_catalog else f"brief.{pack.name}--v001"
    modules = [m for m in (*pack.modules, *pack.optional_modules) if m in ts.modules]
    composed = [t for m in modules for t in ts.modules[m].tables]
    out.notes += flow_lines(path, pack.tables, list(pack.derive), composed)
    with tempfile.TemporaryDirectory(prefix="check-pack-") as tmp:
        work = WorkDir(Path(tmp) / "work", out.world_id)
        ctx = BuildContext(world_id=out.world_id, templates=ts, work=work, data_root=Path(tmp) / "data",
                           inputs="check-pack")
        try:
            brief = _expand(out.world_id, pack.name, kind, 1, ts)
        except Exception as exc:  # noqa: BLE001 - an author gets a line, never a traceback
            out.failures.append(f"{path}: field 'tables': world_brief failed: {type(exc).__name__}: {exc}")
            return out
        work.write("brief.json", (brief.model_dump_json(indent=1) + "\n").encode())
        work.write(PACK, pack_bytes(pack))
        for stage in STAGES[1:[s.name for s in STAGES].index(UPTO) + 1]:
            reason = ""
            try:
                run_make(stage, ctx)
                proof = run_prove(stage, ctx)
                reason = "" if proof.passed else f"{stage.check} failed: {proof.reason}"
            except Exception as exc:  # noqa: BLE001 - every stage's failure becomes a line for the author
                reason = f"{type(exc).__name__}: {exc}"
            if reason:
                where, loc = _where(reason, pack, modules, ts)
                at = ts.root / where if where else path
                out.failures.append(f"{at}: field '{loc}': {stage.name} (world {out.world_id}): "
                                    f"{reason.replace(tmp, '<dry run>')}; {ADVICE.get(stage.name, 'fix it')}")
                return out
        tasks = ctx.tasks(UPTO)
        out.tasks = len(tasks)
        used = {c.tool for t in tasks for c in t.oracle}
        tools = {t["name"] for t in json.loads(work.read("tools.json", UPTO))}
        spec = ctx.spec(UPTO)
        conn = sqlite3.connect(":memory:")
        conn.deserialize(work.read("seed.db", UPTO))
        try:
            from worldfactory.pack_flow import effect_starts, reachable_states, seeded_states

            created = effect_starts([*pack.tables, *composed])
            for i, t in enumerate(pack.tables):
                if t.workflow is None or t.fill is not None or not spec.has_table(t.name):
                    continue
                reach = reachable_states(t, seeded_states(t, list(pack.derive), created.get(t.name))[0])
                for k, tr in enumerate(t.workflow.transitions):
                    if tr.name in used:
                        continue
                    why = _unused_reason(spec, conn, spec.table(t.name), tr, tools, reach)
                    out.notes.append(f"{path}: field 'tables[{i}:{t.name}].workflow.transitions[{k}:{tr.name}]': "
                                     f"no task of {out.world_id} uses {tr.name}: {why}")
        finally:
            conn.close()
    return out


def dry_run_files(paths: list[Path], templates: Path | None = None) -> DryRun:
    """The dry run of every domain pack among the files (modules and company types have none of their own),
    against the templates folder each sits in, as check_files reads it."""
    from worldfactory.packs import _kind_of
    from worldfactory.template_files import DEFAULT_TEMPLATES, _read_yaml, load_model
    from worldfactory.templates import load_templates

    out = DryRun()
    for path in paths:
        if _kind_of(path, _read_yaml(path)) != "domains":
            continue
        root = templates
        if root is None:
            root = path.parent.parent if path.parent.name == "domains" and (path.parent.parent / "modules").is_dir() \
                else DEFAULT_TEMPLATES
        found = dry_run(path, load_model(path, DomainPack), load_templates(root))
        out.failures += found.failures
        out.notes += found.notes
        out.tasks += found.tasks
    return out

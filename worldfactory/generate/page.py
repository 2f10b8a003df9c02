"""The bundle's web page (index.html): one self-contained file that shows a world.

Everything is rendered at build time from the bundle's own files: the schema's entity-relationship
diagram by Graphviz (`dot -Tsvg`, Debian package `graphviz`), the plots as hand-written SVG, no
script, no font, image or style from anywhere else. Every string that comes from the world (names
from packs, briefs and, later, models) is escaped. The page is deterministic: the same bundle
files give the same bytes (no timestamps, no wall-clock numbers; seconds stay in the catalog).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from worldfactory.generate.tools import ToolSpec, tool_specs
from worldfactory.ports import SERVE_PORT
from worldfactory.rollouts import traces_file_lines
from worldfactory.runtime.world import load_json, parsed_spec, parsed_tasks
from worldfactory.spec import Task, WorldSpec

PAGE = "index.html"
SAMPLE_ROWS = 3
CELL_CHARS = 60
PLAN_SHOWN = 5  # oracle calls shown per task (bulk plans run to hundreds); the rest are counted
DIFF_SHOWN = 5  # gold-diff rows shown per task, likewise
LINE_CHARS = 110  # a plan or diff line longer than this is cut
SITE_INDEX = "../index.html"  # the catalog site's index, from its worlds/<id>.html (`worldfactory site`)


class PageError(RuntimeError):
    """The page cannot be rendered (Graphviz missing or failing); the message says what to do."""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _short(value: Any, n: int = CELL_CHARS) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= n else text[: n - 1] + "\u2026"


# --- SVG plots (shared with the catalog site) ------------------------------------------------


def vbar_svg(title: str, items: list[tuple[str, float]], fmt: str = "{:g}", width: int = 520,
             height: int = 220, color: str = "#3b6ea5") -> str:
    """A vertical bar chart: one bar per (label, value), the value written on top."""
    pad_l, pad_b, pad_t = 10, 40, 36
    n = max(len(items), 1)
    vmax = max([v for _, v in items] + [1e-9])
    slot = (width - 2 * pad_l) / n
    plot_h = height - pad_b - pad_t
    parts = [f'<svg class="plot" role="img" aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" class="t">{esc(title)}</text>',
             f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_l}" y2="{height - pad_b}" stroke="#888"/>']
    for i, (label, value) in enumerate(items):
        h = plot_h * value / vmax
        x = pad_l + i * slot + slot * 0.15
        y = height - pad_b - h
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                     f'fill="{color}"><title>{esc(label)}: {esc(fmt.format(value))}</title></rect>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{y - 4:.1f}" text-anchor="middle">'
                     f'{esc(fmt.format(value))}</text>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{height - pad_b + 16}" text-anchor="middle">'
                     f'{esc(_short(label, 18))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def hbar_svg(title: str, items: list[tuple[str, float]], vmax: float | None = None, fmt: str = "{:g}",
             width: int = 520, color: str = "#4a8c5c") -> str:
    """A horizontal bar chart: one row per (label, value), for long labels."""
    row, pad_t, label_w = 22, 28, 170
    height = pad_t + row * max(len(items), 1) + 8
    top = vmax if vmax is not None else max([v for _, v in items] + [1e-9])
    bar_w = width - label_w - 70
    parts = [f'<svg class="plot" role="img" aria-label="{esc(title)}" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" class="t">{esc(title)}</text>']
    for i, (label, value) in enumerate(items):
        y = pad_t + i * row
        w = bar_w * (value / top if top else 0)
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{esc(_short(label, 26))}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="{row - 6}" fill="#eee"/>')
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" '
                     f'fill="{color}"><title>{esc(label)}: {esc(fmt.format(value))}</title></rect>')
        parts.append(f'<text x="{label_w + bar_w + 6}" y="{y + 15}">{esc(fmt.format(value))}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --- the ER diagram --------------------------------------------------------------------------


def er_dot(spec: WorldSpec, members: list[str] | None = None) -> str:
    """Graphviz source: a node per table of `members` (default: every table; its columns, keys marked) and
    an edge per foreign key of theirs. A table they reference that is not a member is drawn as a stub (its
    name in a dashed box), so the edges between the two diagrams of a page are still shown."""
    names = {t.name for t in spec.tables}
    chosen = set(names if members is None else members)
    lines = ["digraph schema {", '  graph [rankdir=LR, fontname="Helvetica", nodesep=0.25, ranksep=0.6];',
             '  node [shape=plaintext, fontname="Helvetica", fontsize=10];',
             '  edge [color="#5a6f8c", arrowsize=0.6, fontname="Helvetica", fontsize=8];']
    stubs: list[str] = []
    for t in spec.tables:
        if t.name not in chosen:
            continue
        rows = [f'<tr><td bgcolor="#dbe6f3" align="left"><b>{esc(t.name)}</b></td></tr>',
                '<tr><td align="left" port="id">id PK</td></tr>']
        for c in t.columns:
            mark = " FK" if c.ref in names else (" ref" if c.poly_ref else "")
            rows.append(f'<tr><td align="left" port="{esc(c.name)}">{esc(c.name)}{mark}'
                        f'<font color="#777">&#160;{esc(c.type)}</font></td></tr>')
            if c.ref in names and c.ref not in chosen and c.ref not in stubs:
                stubs.append(c.ref)
        lines.append(f'  "{t.name}" [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="2">'
                     f'{"".join(rows)}</table>>];')
    for name in stubs:
        lines.append(f'  "{name}" [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="2" '
                     f'style="dashed"><tr><td port="id" bgcolor="#f2f2f2"><i>{esc(name)}</i></td></tr></table>>];')
    for t in spec.tables:
        for c in t.columns:
            if t.name in chosen and c.ref in names:
                lines.append(f'  "{t.name}":"{c.name}" -> "{c.ref}":"id";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def er_svg(spec: WorldSpec, members: list[str] | None = None) -> str:
    """An ER diagram as an inline <svg> element, rendered by Graphviz's dot, scaled to the page's width
    (never above its own size): the whole diagram on the page, not a window onto part of it."""
    dot = shutil.which("dot")
    if dot is None:
        raise PageError("Graphviz's `dot` is not on PATH: the world page renders its ER diagram with it. "
                        "Install the Debian package `graphviz` (apt-get install -y graphviz)")
    proc = subprocess.run([dot, "-Tsvg"], input=er_dot(spec, members).encode(), capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise PageError(f"dot -Tsvg failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[:500]}")
    svg = proc.stdout.decode()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog, doctype and the version comment
    svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.S)
    svg = re.sub(r'<svg width="([0-9.]+)pt" height="[0-9.]+pt"', r'<svg style="width:100%;max-width:\1pt;height:auto"',
                 svg, count=1)
    return svg.replace("<svg ", '<svg class="er" role="img" aria-label="entity-relationship diagram" ', 1)


def er_section(spec: WorldSpec, own: list[str]) -> str:
    """The schema's diagrams: the domain's own tables first, then the shared modules' (org, CRM, email...),
    each whole; a table of the other group that one references is a dashed stub. One diagram without a pack."""
    if not own:
        return f'<div id="er">{er_svg(spec)}</div>'
    shared = [t.name for t in spec.tables if t.name not in set(own)]
    return (f'<div id="er"><h3>{esc(spec.brief.domain)}: the domain\'s own tables</h3>{er_svg(spec, own)}'
            f"<h3>Shared modules: {esc(', '.join(spec.brief.modules))}</h3>{er_svg(spec, shared)}</div>")


# --- the page --------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _signature(tool: ToolSpec) -> str:
    parts = []
    for p in tool.params:
        kind = "|".join(p.enum) if p.enum else p.type
        parts.append(f"{p.name}: {kind}" if p.required else f"{p.name}: {kind} = {p.default!r}")
    return f"{tool.name}({', '.join(parts)})"


def _sample_rows(con: sqlite3.Connection, table: str, n: int = SAMPLE_ROWS) -> tuple[list[str], list[list[Any]]]:
    cur = con.execute(f'SELECT * FROM "{table}" ORDER BY id LIMIT {int(n)}')
    return [d[0] for d in cur.description], [[_short(v) for v in r] for r in cur.fetchall()]


def _sample_trace(lines: list[dict[str, Any]], curated: set[str]) -> dict[str, Any] | None:
    """The first passing rollout of a curated task with a short trace (or the first rollout at all)."""
    rows = sorted(lines, key=lambda r: (r["task_id"], r["policy"], r["rollout"]))
    for want in (lambda r: r["task_id"] in curated and r["reward"] >= 1 and 3 <= len(r["trace"]) <= 12,
                 lambda r: r["reward"] >= 1, lambda r: True):
        for r in rows:
            if want(r):
                return r
    return None


def _own_tables(folder: Path) -> list[str]:
    """The domain's own tables (its pack's), in the pack's order; empty when the folder has no pack.json."""
    path = folder / "pack.json"
    return [t["name"] for t in json.loads(path.read_text()).get("tables", [])] if path.is_file() else []


def _text(value: Any) -> str:
    """Escaped for element content (quotes stay quotes: plans and diffs are full of them)."""
    return html.escape(str(value), quote=False)


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(values.items()))


def _diff_lines(diff: dict[str, Any]) -> list[str]:
    """The gold diff, one line per changed row: `table #id: col=value` (updated), `+ table: ...` (inserted),
    `- table #id` (deleted), updates first."""
    lines = []
    for kind, sign in (("updated", ""), ("inserted", "+ "), ("deleted", "- ")):  # updates first: the task's point
        for table in sorted(diff):
            part = diff[table].get(kind)
            items = sorted(part.items(), key=lambda kv: (len(kv[0]), kv[0])) if isinstance(part, dict) else [
                (None, v) for v in part or []]
            for key, v in items:
                where = f"{table} #{key}" if key is not None else table
                body = _kv(v) if isinstance(v, dict) else json.dumps(v)
                lines.append(f"{sign}{where}" + (f": {body}" if kind != "deleted" else ""))
    return lines


def _task_details(task: Task, gold: dict[str, Any], rate: str, curated: bool) -> str:
    """One task, collapsed: its oracle plan (the first PLAN_SHOWN calls) and its gold diff (the first DIFF_SHOWN
    changed rows), the answer it expects, if any: what the verifier compares an agent's end state with."""
    calls = [f"{c.tool}({_kv(c.args)})" for c in task.oracle]
    changes = _diff_lines(gold.get("diff") or {})

    def block(lines: list[str], shown: int, what: str) -> str:
        more = [f"... and {len(lines) - shown} more {what}"] if len(lines) > shown else []
        return "<pre>" + _text("\n".join(_short(x, LINE_CHARS) for x in [*lines[:shown], *more])) + "</pre>"

    answer = (f"<br>Expected answer: <code>{_text(_short(json.dumps(task.answer, sort_keys=True), 200))}</code>"
              if task.answer is not None else "")
    return (f'<details class="task"><summary><code>{esc(task.task_id)}</code> ({len(task.oracle)} calls, pass '
            f"{esc(rate)}{', curated' if curated else ''}): {_text(task.instruction)}</summary>"
            f"Oracle plan{block(calls, PLAN_SHOWN, 'calls')}"
            + (f"Gold diff ({len(changes)} rows){block(changes, DIFF_SHOWN, 'rows')}" if changes
               else "Gold diff: none (the state must stay as seeded)")
            + answer + "</details>")


def _flags(tool: ToolSpec) -> str:
    return ", ".join(f for f, on in (("read-only", tool.read_only), ("writes", not tool.read_only),
                                     ("destructive", tool.destructive), ("idempotent", tool.idempotent)) if on)


def _tools_section(tools: list[ToolSpec], spec: WorldSpec, own: list[str]) -> list[str]:
    """The tools, one collapsed group per table: the domain's own tables first, then the shared modules'."""
    by_table: dict[str, list[ToolSpec]] = defaultdict(list)
    for t in tools:
        by_table[t.table].append(t)
    order = [t.name for t in spec.tables]
    tables = [n for n in own if n in by_table] + [n for n in order if n in by_table and n not in own] + sorted(
        n for n in by_table if n not in order and n not in own)
    provenance = sorted({t.provenance for t in tools})
    out = [f"<p>{len(tools)} tools on {len(tables)} tables, grouped by the table they act on (the domain's own "
           f"tables first); provenance: {esc(', '.join(provenance))}. Open a table to see its tools.</p>"]
    heading = None
    for name in tables:
        group = "The domain's own tables" if name in own else "Shared modules"
        if own and group != heading:
            out.append(f"<h3>{group}</h3>")
            heading = group
        ts = by_table[name]
        kinds = ", ".join(sorted({t.kind for t in ts}))
        out.append(f'<details class="tools"><summary>{esc(name)} ({len(ts)} tools: {esc(kinds)})</summary>'
                   + _table(["tool", "signature", "kind", "description"],
                            [[t.name, _signature(t), _flags(t), t.description] for t in ts], "tools")
                   + "</details>")
    return out


CSS = """
body{font:14px/1.45 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f3b5a;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:24px}
header p{margin:2px 0;opacity:.9}main{padding:8px 28px 40px;max-width:1400px}
h2{border-bottom:2px solid #1f3b5a;padding-bottom:3px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0;background:#fff;font-size:12.5px}
th,td{border:1px solid #ccd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#e8eef5}
.scroll{overflow:auto;max-height:720px;border:1px solid #ccd;background:#fff}
.plots{display:flex;flex-wrap:wrap;gap:18px}.plot{background:#fff;border:1px solid #ccd}
.plot text{font-size:11px;fill:#333}.plot text.t{font-size:13px;font-weight:bold}
code,pre{font-family:Menlo,Consolas,monospace;font-size:12px}pre{background:#f0f0f0;padding:10px;overflow:auto}
.kpi{display:flex;gap:14px;flex-wrap:wrap}.kpi div{background:#fff;border:1px solid #ccd;padding:8px 14px}
.kpi b{display:block;font-size:20px;color:#1f3b5a}details{margin:6px 0}summary{cursor:pointer;font-weight:bold}
nav a{margin-right:12px;color:#1f3b5a}.note{color:#666;font-style:italic}
header a{color:#cfe0f3}#er{background:#fff;border:1px solid #ccd;padding:6px}details.task{margin:2px 0 2px 14px}
details.task summary,details.tools summary{font-weight:normal}details.task pre{margin:2px 0 6px;padding:6px}
h3{margin:14px 0 4px}
"""


def world_page(folder: Path, manifest: dict[str, Any], stages: list[str],
               traces: list[dict[str, Any]] | None = None) -> str:
    """The page of the world whose stage files are in `folder` (a work folder or a published bundle).

    `manifest` is world.json as the bundle stage has it before the page is added: its `files` list
    every other file but world.json itself. `worldfactory page` passes the published world.json
    with `index.html` taken out, and gets the same bytes. `traces`: the folder's traces file, already
    read (traces_file_lines), by a caller that needs it too. `stages`: the build's stage names in order (the
    cost table's rows; the registry, worldfactory.stages, imports the stage that calls this).
    """
    spec = parsed_spec((folder / "spec.json").read_bytes())
    b = spec.brief
    tools = tool_specs(spec)
    served = set(load_json((folder / "verifiers.json").read_bytes())["tasks"])
    tasks = [t for t in parsed_tasks((folder / "tasks.jsonl").read_bytes()) if t.task_id in served]
    curated = {json.loads(line)["task_id"] for line in (folder / "curated_tasks.jsonl").read_text().splitlines()
               if line}
    rollouts = json.loads((folder / "rollouts.json").read_text())
    rates: dict[str, list[int]] = rollouts.get("pass_rates", {})
    report = [json.loads(line) for line in (folder / "verifier_report.jsonl").read_text().splitlines() if line]
    c = manifest["counts"]
    wid = b.world_id
    own = _own_tables(folder)
    gold = load_json((folder / "verifiers.json").read_bytes())["tasks"]
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
        'img-src data:">',
        f"<title>{esc(b.company_name)}: {esc(wid)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{esc(b.company_name)}</h1><p><code>{esc(wid)}</code>: a fictional {esc(b.company_type)} "
        f"company in the {esc(b.domain)} domain; the world clock reads {esc(b.clock)}.</p>"
        f"<p>Generated by WorldFactory {esc(b.generator_version)} from seed {esc(b.generation_seed)}. "
        f'<a href="{SITE_INDEX}">All worlds in the catalog</a> (on the site, <code>worldfactory site</code>).</p>'
        "</header>",
        "<main><nav>" + "".join(f'<a href="#{a}">{t}</a>' for a, t in (
            ("rules", "Rules"), ("schema", "Schema"), ("tables", "Tables"), ("tools", "Tools"), ("tasks", "Tasks"),
            ("rollouts", "Pass rates"), ("trace", "Sample trace"), ("verifiers", "Verifiers"), ("cost", "Cost"),
            ("provenance", "Provenance"), ("use", "Use"))) + "</nav>",
        '<div class="kpi">' + "".join(f"<div><b>{esc(v)}</b>{esc(k)}</div>" for k, v in (
            ("tables", c["tables"]), ("rows", c["rows"]), ("tools", c["tools"]), ("tasks", c["tasks"]),
            ("curated tasks", c.get("curated_tasks", len(curated))),
            ("oracle passes", f"{manifest['verification']['oracle_pass']}/{manifest['verification']['tasks']}"))) +
        "</div>",
        '<h2 id="rules">Company and business rules</h2>',
        f"<p>Modules: {esc(', '.join(b.modules))}. Departments: {esc(', '.join(b.departments))}.</p>",
        _table(["rule", "value", "name"], [[r.label, f"{b.rules[r.name]:g}", r.name] for r in spec.rules], "rules"),
        '<h2 id="schema">Schema</h2>',
        f"<p>{len(spec.tables)} tables; an arrow runs from each foreign key to the table it references"
        + (f". The domain's own {len(own)} tables first, then the shared modules'; a dashed box is a table of "
           "the other diagram." if own else ".") + "</p>",
        er_section(spec, own),
        '<h2 id="tables">Tables</h2>',
    ]
    con = sqlite3.connect(f"file:{folder / 'seed.db'}?mode=ro&immutable=1", uri=True)
    samples = {}
    try:
        for t in spec.tables:
            samples[t.name] = (*_sample_rows(con, t.name),
                               int(con.execute(f'SELECT count(*) FROM "{t.name}"').fetchone()[0]))
    finally:
        con.close()
    for t in spec.tables:
        cols, sample, rows_n = samples[t.name]
        out.append(f'<details class="tbl"><summary>{esc(t.name)}: {rows_n} rows</summary>'
                   f"<p>{esc(t.description or t.singular)}</p><div class=\"scroll\">"
                   f"{_table(cols, sample, 'sample')}</div></details>")
    out += ['<h2 id="tools">Tools</h2>', *_tools_section(tools, spec, own),
            '<h2 id="tasks">Tasks by family</h2>',
            "<p>Open a family for its tasks, then a task for its oracle plan and gold diff: the end state the "
            "verifier compares an agent's with (every table; anything else changed fails).</p>"]
    by_family: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by_family[t.family].append(t)
    for family, ts in sorted(by_family.items()):
        out.append(f"<details><summary>{esc(family)} ({len(ts)} tasks)</summary>")
        out += [_task_details(t, gold.get(t.task_id, {}),
                              f"{rates[t.task_id][0]}/{rates[t.task_id][1]}" if t.task_id in rates else "n/a",
                              t.task_id in curated) for t in ts]
        out.append("</details>")
    hist = rollouts.get("histogram", {})
    order = ["0", "(0,0.25]", "(0.25,0.5]", "(0.5,0.75]", "(0.75,1)", "1"]
    family_rates = []
    for family, ts in sorted(by_family.items()):
        got = [rates[t.task_id] for t in ts if t.task_id in rates]
        family_rates.append((family, sum(p for p, _ in got) / max(sum(k for _, k in got), 1)))
    out += ['<h2 id="rollouts">Pass rates</h2>',
            f"<p>{esc(rollouts.get('policy', ''))} policy, k = {esc(rollouts.get('k', ''))} rollouts per task. "
            f"Curated tasks are those with a pass rate strictly between 0 and 1.</p>",
            '<div class="plots">',
            vbar_svg("Pass band: tasks per pass-rate bucket",
                     [(k, float(hist[k])) for k in order if k in hist] +
                     [(k, float(v)) for k, v in sorted(hist.items()) if k not in order]),
            hbar_svg("Pass rate per family", family_rates, vmax=1.0, fmt="{:.0%}"),
            "</div>"]
    if traces is None:
        traces = traces_file_lines((folder / "traces.jsonl.gz").read_bytes())
    trace = _sample_trace(traces, curated)
    out.append('<h2 id="trace">A sample trace</h2>')
    if trace is None:
        out.append('<p class="note">No rollout recorded.</p>')
    else:
        instruction = next((t.instruction for t in tasks if t.task_id == trace["task_id"]), "")
        out.append(f"<p>Task <code>{esc(trace['task_id'])}</code>, policy {esc(trace['policy'])}, rollout "
                   f"{esc(trace['rollout'])}, reward {esc(trace['reward'])}: <em>{esc(instruction)}</em></p>")
        out.append(_table(["step", "tool", "arguments", "result"],
                          [[s["step"], s["tool"], _short(json.dumps(json.loads(s["args_json"]), sort_keys=True), 160),
                            ("error: " + _short(s.get("error_text") or "", 160)) if s.get("error")
                            else _short(s["result_json"], 160)] for s in trace["trace"]], "trace"))
    validity = manifest.get("verifier_validity", {})
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for r in report:
        for m in r.get("mutant_results", []):
            outcome = "equivalent" if m.get("equivalent") else ("missed" if m.get("passed") else "caught")
            kinds[m["kind"]][outcome] += 1
            kinds[m["kind"]]["mutants"] += 1
    out += ['<h2 id="verifiers">Verifier validity</h2>',
            f"<p>Every oracle plan must score 1 and doing nothing 0; each mutant of a plan that changes the final "
            f"state must score 0. {esc(validity.get('caught', 0))} of "
            f"{esc(validity.get('mutants', 0) - validity.get('equivalent', 0))} state-changing mutants caught "
            f"(rate {esc(validity.get('caught_rate', ''))}); {esc(validity.get('equivalent', 0))} mutants left "
            f"the state as gold; reordered independent steps passed {esc(validity.get('reordered_pass', 0))}/"
            f"{esc(validity.get('reordered_checked', 0))}; valid alternative solutions passed "
            f"{esc(validity.get('alternatives_passed', 0))}/{esc(validity.get('alternatives', 0))}.</p>",
            _table(["mutant kind", "mutants", "caught", "missed", "equivalent"],
                   [[k, v["mutants"], v["caught"], v["missed"], v["equivalent"]] for k, v in sorted(kinds.items())],
                   "validity")]
    order = {name: i for i, name in enumerate(stages)}
    costs = dict(sorted(manifest.get("costs", {}).items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    out += ['<h2 id="cost">Cost per stage</h2>',
            _table(["stage", "prompt tokens", "completion tokens", "cost (USD)", "corrections"],
                   [[s, v["llm_prompt_tokens"], v["llm_completion_tokens"], f"{v['cost_usd']:.4f}", v["corrections"]]
                    for s, v in costs.items()], "costs"),
            '<p class="note">Seconds per stage are not in the bundle (its bytes do not depend on the clock); '
            "they are in the costs catalog: <code>worldfactory query \"SELECT stage, wall_seconds FROM costs WHERE "
            f"world_id = '{esc(wid)}'\"</code>, and on the catalog site (<code>worldfactory site</code>).</p>",
            '<h2 id="provenance">Provenance</h2>',
            _table(["", ""], [["world", wid], ["seed type", b.seed_type], ["generation seed", b.generation_seed],
                              ["generator version", b.generator_version],
                              ["inputs fingerprint", manifest.get("inputs_fingerprint", "")]], "prov"),
            "<p>Bundle files and their SHA-256 (world.json lists these and this page's own hash):</p>",
            _table(["file", "sha256"], sorted(manifest["files"].items()), "hashes"),
            '<h2 id="use">Serve, run, build</h2>',
            "<pre>" + esc("\n".join([
                f"worldfactory serve {wid}                    # MCP over stdio",
                f"worldfactory serve {wid} --transport http   # streamable HTTP on 127.0.0.1:{SERVE_PORT}/mcp",
                f"worldfactory run {wid} {tasks[0].task_id if tasks else 'TASK'} --policy oracle",
                f"worldfactory rollouts {wid} --policy noisy -k 8",
                f"worldfactory build {wid}                    # rebuild from world_templates/ (same bytes)",
                f"worldfactory page {wid} --out page.html     # this page again"])) + "</pre>",
            "</main></body></html>", ""]
    return "\n".join(out)


def bundle_page(bundle: Path, stages: list[str]) -> str:
    """The page of a published bundle, from its files: the same bytes as its index.html (`stages`: the build's
    stage names in order, as world_page)."""
    manifest = json.loads((bundle / "world.json").read_text())
    manifest["files"] = {k: v for k, v in manifest["files"].items() if k != PAGE}
    return world_page(bundle, manifest, stages)

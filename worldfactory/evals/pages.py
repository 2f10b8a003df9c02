"""Evaluation runs on the pages: the world page's and the catalog site's runs section, an episode page per
example, and the same numbers as Markdown for the Dagster asset's metadata.

Everything is read from the runs' summary.json (evals/summary.py), so a page never replays an episode.
The bundle's own index.html stays the bundle's bytes: the runs section is added where a page is rendered
with a data root (`worldfactory page WORLD`, the catalog site). Links follow the site's layout:
worlds/<world>.html, runs/<run>/<world>--<task>--<rollout>.html.
"""

from __future__ import annotations

import json
from pathlib import Path

from worldfactory.evals import runs
from worldfactory.evals.summary import RunSummary, cause_text, summaries
from worldfactory.generate.page import CSS, esc, hbar_svg

BAR = 24  # characters of the widest bar in the Markdown chart


def episode_href(rid: str, world_id: str, task_id: str, rollout: int) -> str:
    """An example episode's page, relative to the site's root."""
    return f"runs/{rid}/{world_id}--{task_id}--{rollout}.html"


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


def runs_section(found: list[RunSummary], world_id: str | None = None, prefix: str = "") -> str:
    """The runs section: pass rate per family per run (a table and a chart each), the causes as a bar chart,
    and links to one example episode per cause. `world_id`: the world page's own numbers only; `prefix`:
    the path from the page to the site's root (world pages sit one folder down)."""
    out = ['<h2 id="runs">Evaluation runs</h2>']
    if not found:
        out.append('<p class="note">No evaluation run yet: <code>worldfactory eval run WORLD --policy P</code>.</p>')
        return "\n".join(out)
    fams = sorted({f for s in found for f in (s.by_world.get(world_id, {}) if world_id else s.families)} - {"all"})
    head = "".join(f"<th>{esc(s.run_id)}<br><small>{esc(s.policy)}, k={s.k}</small></th>" for s in found)
    rows = []
    for fam in [*fams, "all"]:
        cells = []
        for s in found:
            if world_id and fam != "all":
                cells.append(_pct(s.by_world.get(world_id, {}).get(fam)))
            else:
                r = s.families.get(fam)
                cells.append("-" if r is None else f"{_pct(r.pass1.rate)} <small>pass^k {_pct(r.passk.rate)}"
                                                   "</small>")
        rows.append(f"<tr><td>{esc(fam)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append('<p>Pass rate (pass^1) per family per run; a run\'s band is its policy\'s curriculum '
               '(0 &lt; pass rate &lt; 1 over k).</p>')
    out.append(f'<table class="runs"><thead><tr><th>family</th>{head}</tr></thead><tbody>{"".join(rows)}'
               "</tbody></table>")
    out.append('<div class="plots">')
    for s in found:
        per_family = s.by_world.get(world_id, {}) if world_id else {f: r.pass1.rate for f, r in s.families.items()
                                                                     if f != "all"}
        out.append(hbar_svg(f"{s.run_id}: pass rate per family", sorted(per_family.items()), vmax=1.0,
                            fmt="{:.0%}"))
        out.append(hbar_svg(f"{s.run_id}: failures by cause", [(c, float(n)) for c, n in s.causes.items()],
                            color="#a53b3b"))
    out.append("</div>")
    for s in found:
        band = s.band.get(world_id, 0) if world_id else sum(s.band.values())
        top = f"top cause <b>{esc(s.top_cause)}</b>" if s.top_cause else "no failure"
        out.append(f'<h3 class="run">{esc(s.run_id)}</h3><p>{esc(s.policy)}: {s.passes}/{s.episodes} episodes '
                   f"passed; {top}; band {band} task(s).</p>")
        items = [(c, e) for c, e in s.examples.items() if world_id is None or e.world_id == world_id]
        if items:
            out.append("<ul class=\"examples\">" + "".join(
                f'<li><a href="{esc(prefix + episode_href(s.run_id, e.world_id, e.task_id, e.rollout))}">'
                f"{esc(c)}</a>: {esc(cause_text(c))}. <em>{esc(e.instruction)}</em> ({esc(e.detail)})</li>"
                for c, e in items) + "</ul>")
    return "\n".join(out)


def with_runs(page: str, section: str) -> str:
    """A world page with the runs section added at the end of its main content."""
    at = page.rfind("</main>")
    return page if at < 0 else page[:at] + section + "\n" + page[at:]


def world_page_with_runs(data_root: Path, world_id: str, page: str) -> str:
    return with_runs(page, runs_section(summaries(data_root, world_id), world_id, prefix="../"))


def episode_page(data_root: Path, rid: str, world_id: str, task_id: str, rollout: int) -> str:
    """One example episode: its instruction, cause, answer and every call it made."""
    s = next(x for x in summaries(data_root) if x.run_id == rid)
    episode = next(e for e in runs.run_episodes(data_root, rid)
                   if (e["world_id"], e["task_id"], e["rollout"]) == (world_id, task_id, rollout))
    example = next(((c, e) for c, e in s.examples.items()
                    if (e.world_id, e.task_id, e.rollout) == (world_id, task_id, rollout)), None)
    cause = f"<p>Cause: <b>{esc(example[0])}</b> ({esc(cause_text(example[0]))}): {esc(example[1].detail)}</p>" \
        if example else ""
    steps = "".join(
        f"<tr><td>{st['step']}</td><td>{esc(st['tool'])}</td><td>{esc(st['args_json'])}</td><td>"
        f"{esc(('error: ' + (st.get('error_text') or '')) if st.get('error') else st.get('result_json', ''))[:300]}"
        "</td></tr>" for st in sorted(episode["trace"], key=lambda x: x["step"]))
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
        f"<title>{esc(rid)}: {esc(task_id)} rollout {rollout}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{esc(task_id)}, rollout {rollout}</h1><p>run <code>{esc(rid)}</code> ({esc(s.policy)}) on "
        f'<a href="../../worlds/{esc(world_id)}.html" style="color:#fff">{esc(world_id)}</a>; reward '
        f"{esc(episode['reward'])}</p></header><main>",
        cause, f"<p>Answer: <code>{esc(json.dumps(episode.get('answer')))}</code></p>",
        f'<table class="trace"><thead><tr><th>step</th><th>tool</th><th>arguments</th><th>result</th></tr></thead>'
        f"<tbody>{steps}</tbody></table>", "</main></body></html>", ""])


def run_site_files(data_root: Path) -> dict[str, bytes]:
    """The site's runs pages: one per example episode of every summarised run."""
    files: dict[str, bytes] = {}
    for s in summaries(data_root):
        for e in s.examples.values():
            files[episode_href(s.run_id, e.world_id, e.task_id, e.rollout)] = episode_page(
                data_root, s.run_id, e.world_id, e.task_id, e.rollout).encode()
    return files


def families_markdown(s: RunSummary) -> str:
    """pass^1 and pass^k per family with their 95% intervals, as a Markdown table."""
    lines = ["| family | pass^1 | pass^k | tasks |", "|---|---|---|---|"]
    lines += [f"| {f} | {r.pass1.text()} | {r.passk.text()} | {r.tasks} |" for f, r in s.families.items()]
    return "\n".join(lines)


def causes_markdown(s: RunSummary) -> str:
    """The causes as a bar chart in Markdown (block characters), with an example episode each."""
    if not s.causes:
        return "No episode failed."
    top = max(s.causes.values())
    lines = ["| cause | failures | | example |", "|---|---|---|---|"]
    for c, n in s.causes.items():
        e = s.examples.get(c)
        ex = f"{e.world_id} {e.task_id} rollout {e.rollout}: {e.detail}" if e else ""
        lines.append(f"| {c} | {n} | `{'█' * max(1, round(BAR * n / top))}` | {ex.replace('|', '/')} |")
    return "\n".join(lines)


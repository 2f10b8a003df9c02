"""The catalog site: an index of every built world, read from the Parquet catalogs through DuckDB.

`worldfactory site` serves it on loopback; `worldfactory site --out DIR` writes it as static files
(index.html and worlds/<id>.html, each world's own bundle page; where evaluation runs exist, a runs
section on both and runs/<run>/... pages for their example episodes). Filters by domain, company type
and task family are a small inline script over the rows already on the page (without script every
row shows); the plots are inline SVG. Nothing on a page asks the network for anything.
"""

from __future__ import annotations

import http.server
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from worldfactory.catalog import create_views
from worldfactory.evals.pages import run_site_files, runs_section, with_runs
from worldfactory.evals.summary import summaries
from worldfactory.generate.page import CSS, PAGE, esc, hbar_svg, vbar_svg

BUCKETS = ["0", "(0,0.25]", "(0.25,0.5]", "(0.5,0.75]", "(0.75,1)", "1"]

FILTER_JS = """
function wfFilter(){
  var d=document.getElementById('f-domain').value,c=document.getElementById('f-company').value,
      f=document.getElementById('f-family').value,shown=0;
  document.querySelectorAll('#worlds tbody tr').forEach(function(r){
    var ok=(!d||r.dataset.domain===d)&&(!c||r.dataset.company===c)&&
           (!f||(' '+r.dataset.families+' ').indexOf(' '+f+' ')>=0);
    r.style.display=ok?'':'none'; if(ok){shown++;}
  });
  document.getElementById('shown').textContent=shown;
}
"""


def _rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()


def catalog_data(data_root: Path) -> dict[str, Any]:
    """What the index shows, from the catalog views (an empty catalog gives empty lists)."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        create_views(con, data_root / "catalog")
        worlds = _rows(con, "SELECT world_id, domain, company_type, company_name, tables, rows, tools, tasks, "
                            "oracle_pass, null_pass, generator_version, path FROM worlds ORDER BY world_id")
        families = dict(_rows(con, "SELECT world_id, string_agg(DISTINCT family, ' ' ORDER BY family) "
                                   "FROM tasks GROUP BY world_id"))
        return {
            "worlds": worlds,
            "families": families,
            "family_tasks": _rows(con, "SELECT family, count(*), round(avg(oracle_steps), 1) FROM tasks "
                                       "GROUP BY family ORDER BY family"),
            "per_domain": _rows(con, "SELECT domain, count(*), sum(tasks) FROM worlds GROUP BY domain "
                                     "ORDER BY domain"),
            "pass_rates": [r[0] for r in _rows(
                con, "SELECT avg(CASE WHEN reward >= 1 THEN 1.0 ELSE 0.0 END) FROM rollouts "
                     "WHERE world_id IN (SELECT world_id FROM worlds) GROUP BY world_id, policy, task_id")],
            "stage_seconds": _rows(con, "SELECT stage, sum(wall_seconds) FROM costs WHERE world_id IN "
                                        "(SELECT world_id FROM worlds) GROUP BY stage ORDER BY stage"),
            "world_cost": _rows(con, "SELECT world_id, sum(cost_usd), sum(wall_seconds), sum(cpu_seconds) FROM costs "
                                     "WHERE world_id IN (SELECT world_id FROM worlds) GROUP BY world_id "
                                     "ORDER BY world_id"),
        }
    finally:
        con.close()


def _bucket(rate: float) -> str:
    if rate <= 0:
        return "0"
    if rate >= 1:
        return "1"
    for bound, name in ((0.25, "(0,0.25]"), (0.5, "(0.25,0.5]"), (0.75, "(0.5,0.75]")):
        if rate <= bound:
            return name
    return "(0.75,1)"


def _select(ident: str, label: str, values: list[str]) -> str:
    opts = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
    return (f'<label>{esc(label)} <select id="{ident}" onchange="wfFilter()"><option value="">all</option>'
            f"{opts}</select></label> ")


def cost_plot(world_cost: list[tuple[Any, ...]]) -> str:
    """What each world cost: model dollars when any world spent some; otherwise (offline builds spend $0) the
    CPU seconds its stages took, so the plot says something instead of showing empty bars."""
    dollars = [(w, float(c or 0)) for w, c, *_ in world_cost]
    if any(v > 0 for _, v in dollars):
        return hbar_svg("Cost per world (USD)", dollars, fmt="${:.4f}", color="#3b6ea5")
    cpu = [(w, float(cpu or 0)) for w, _c, _s, cpu in world_cost]
    return hbar_svg("Cost per world: CPU seconds (model cost $0)", cpu, fmt="{:.1f} s", color="#3b6ea5")


def index_page(data: dict[str, Any], linked: set[str]) -> str:
    worlds = data["worlds"]
    families = data["families"]
    from worldfactory.stages import STAGES

    stage_order = [s.name for s in STAGES]
    seconds = dict(data["stage_seconds"])
    stages = [s for s in stage_order if s in seconds] + sorted(s for s in seconds if s not in stage_order)
    hist = {b: 0 for b in BUCKETS}
    for rate in data["pass_rates"]:
        hist[_bucket(float(rate))] += 1
    rows = []
    for (wid, domain, ctype, company, tables, nrows, tools, tasks, oracle, null, _gen, _path) in worlds:
        name = f'<a href="worlds/{esc(wid)}.html">{esc(wid)}</a>' if wid in linked else esc(wid)
        rows.append(f'<tr data-domain="{esc(domain)}" data-company="{esc(ctype)}" '
                    f'data-families="{esc(families.get(wid, ""))}"><td>{name}</td><td>{esc(company)}</td>'
                    f"<td>{esc(domain)}</td><td>{esc(ctype)}</td><td>{tables}</td><td>{nrows}</td><td>{tools}</td>"
                    f"<td>{tasks}</td><td>{oracle}/{tasks}</td><td>{null}</td>"
                    f"<td>{esc(families.get(wid, ''))}</td></tr>")
    total_cost = sum(float(c or 0) for _, c, *_ in data["world_cost"])
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
        'script-src \'unsafe-inline\'; img-src data:">',
        f"<title>WorldFactory catalog</title><style>{CSS}</style><script>{FILTER_JS}</script></head><body>",
        f"<header><h1>WorldFactory catalog</h1><p>{len(worlds)} worlds, "
        f"{sum(w[7] for w in worlds)} tasks, {sum(w[5] for w in worlds)} rows; read from the Parquet catalogs "
        f"through DuckDB.</p></header><main>",
        '<h2 id="plots">Across the catalog</h2><div class="plots">',
        vbar_svg("Worlds per domain", [(d, float(n)) for d, n, _ in data["per_domain"]]),
        vbar_svg("Tasks per domain", [(d, float(t or 0)) for d, _, t in data["per_domain"]], color="#7a5ea8"),
        vbar_svg("Pass-rate distribution (tasks x policy)", [(b, float(hist[b])) for b in BUCKETS],
                 color="#4a8c5c"),
        hbar_svg("Build seconds per stage (all worlds)", [(s, float(seconds[s] or 0)) for s in stages],
                 fmt="{:.1f}", color="#a5663b"),
        cost_plot(data["world_cost"]),
        "</div>",
        f'<p class="note">Total model cost across the catalog: ${total_cost:.4f} (offline builds spend nothing).</p>',
        '<h2 id="index">Worlds</h2><form class="filters" onsubmit="return false">',
        _select("f-domain", "domain", sorted({w[1] for w in worlds})),
        _select("f-company", "company type", sorted({w[2] for w in worlds})),
        _select("f-family", "task family", [f for f, _, _ in data["family_tasks"]]),
        f' showing <b id="shown">{len(worlds)}</b> of {len(worlds)}</form>',
        '<table id="worlds"><thead><tr><th>world</th><th>company</th><th>domain</th><th>company type</th>'
        "<th>tables</th><th>rows</th><th>tools</th><th>tasks</th><th>oracle passes</th><th>null passes</th>"
        "<th>families</th></tr></thead><tbody>",
        *rows, "</tbody></table>",
        '<h2 id="families">Task families</h2>',
        '<table id="family-table"><thead><tr><th>family</th><th>tasks</th><th>mean oracle steps</th></tr></thead>'
        "<tbody>" + "".join(f"<tr><td>{esc(f)}</td><td>{n}</td><td>{s}</td></tr>" for f, n, s in data["family_tasks"])
        + "</tbody></table>",
        "<h2>Build seconds and cost per world</h2>",
        '<table id="costs"><thead><tr><th>world</th><th>CPU seconds</th><th>wall seconds</th><th>cost (USD)</th>'
        "</tr></thead><tbody>"
        + "".join(f"<tr><td>{esc(w)}</td><td>{float(cpu or 0):.2f}</td><td>{float(s or 0):.2f}</td>"
                  f"<td>{float(c or 0):.4f}</td></tr>" for w, c, s, cpu in data["world_cost"]) + "</tbody></table>",
        "</main></body></html>", ""])


def site_files(data_root: Path) -> dict[str, bytes]:
    """The site's files: index.html and worlds/<id>.html (each world's bundle page, where it has one)."""
    data = catalog_data(data_root)
    files: dict[str, bytes] = {}
    for wid, *_rest, path in data["worlds"]:
        page = Path(path) / PAGE
        if not page.is_file():
            page = data_root / "worlds" / wid / PAGE
        if page.is_file():
            files[f"worlds/{wid}.html"] = page.read_bytes()
    index = index_page(data, {name[len("worlds/"):-len(".html")] for name in files})
    found = summaries(data_root)  # evaluation runs: a section on the index and on each world's page they played
    if found:
        for name in list(files):
            wid = name[len("worlds/"):-len(".html")]
            mine = [s for s in found if wid in s.worlds]
            if mine:
                files[name] = with_runs(files[name].decode(), runs_section(mine, wid, prefix="../")).encode()
        index = with_runs(index, runs_section(found))
        files.update(run_site_files(data_root))
    files["index.html"] = index.encode()
    return files


def export(data_root: Path, out: Path) -> list[Path]:
    written = []
    for name, data in sorted(site_files(data_root).items()):
        dest = out / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        written.append(dest)
    return written


def make_server(data_root: Path, host: str = "127.0.0.1", port: int = 8080) -> http.server.ThreadingHTTPServer:
    """A read-only HTTP server for the site; each request reads the catalog afresh."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            path = unquote(self.path.split("?", 1)[0]).lstrip("/") or "index.html"
            files = site_files(data_root)
            body = files.get(path)
            if body is None:
                self.send_error(404, "not in the catalog")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return http.server.ThreadingHTTPServer((host, port), Handler)

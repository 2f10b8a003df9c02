"""The world page (index.html in every bundle, `worldfactory page`) and the catalog site (`worldfactory site`),
looked at in headless Chromium (Debian package `chromium`) with every host name unresolvable."""

from __future__ import annotations

import html as html_mod
import json
import posixpath
import re
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import SMALL
from worldfactory.cli import main as wf_main
from worldfactory.generate import page as page_mod
from worldfactory.generate.bundle import sha256
from worldfactory.generate.page import PAGE, PageError, bundle_page
from worldfactory.site import catalog_data, cost_plot, export, make_server, site_files
from worldfactory.stages import STAGES
from worldfactory.stages.core import StageCost, StageReport
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian package `chromium`) "
                                                              "is not installed; .ci/run installs it")
# a URL to anything but this machine, in src/href/url()/@import
STAGE_NAMES = [s.name for s in STAGES]  # the cost table's order (generate/page.py bundle_page)
EXTERNAL = re.compile(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""",
                      re.I)


@pytest.fixture(scope="module")
def built(small_data: Path) -> Path:
    return small_data


def measure(page: Path, tmp: Path, body: str) -> dict:
    """Lay `page` out in headless Chromium (in an iframe of a harness page beside it) and run `body`, a
    function body over its document `d`, returning JSON: what the layout is, not what the HTML says."""
    harness = tmp / "measure.html"
    harness.write_text(
        f'<html><body style="margin:0"><iframe id="f" src="{page.as_uri()}" style="width:1280px;height:2000px;'
        'border:0"></iframe><pre id="out">pending</pre><script>document.getElementById("f").onload = function () {'
        'var d = this.contentDocument; var out; try { out = JSON.stringify((function (d) {' + body + '})(d)); }'
        ' catch (e) { out = JSON.stringify({error: String(e)}); } document.getElementById("out").textContent = out;'
        '};</script></body></html>')
    dom = chromium("--allow-file-access-from-files", "--virtual-time-budget=10000", "--window-size=1300,2100",
                   "--dump-dom", harness.as_uri(), tmp=tmp).stdout
    found = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
    assert found and found.group(1) != "pending", dom[-2000:]
    return json.loads(html_mod.unescape(found.group(1)))


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp / 'chromium-profile'}",
           "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)


def test_the_bundle_holds_its_page_hashed_and_page_renders_the_same_bytes(built: Path, tmp_path: Path,
                                                                          small_templates: Path) -> None:
    bundle = built / "worlds" / SMALL[0]
    raw = (bundle / PAGE).read_bytes()
    assert json.loads((bundle / "world.json").read_text())["files"][PAGE] == sha256(raw)
    assert bundle_page(bundle, STAGE_NAMES).encode() == raw
    out = tmp_path / "page.html"
    assert wf_main(["page", str(bundle), "--out", str(out)]) == 0
    assert out.read_bytes() == raw
    # the same world built again, elsewhere: the same bytes (no timestamps, no seconds)
    again = tmp_path / "again"
    build_world(SMALL[0], again, templates=load_templates(small_templates))
    assert (again / "worlds" / SMALL[0] / PAGE).read_bytes() == raw


def test_the_page_shows_the_world(built: Path) -> None:
    bundle = built / "worlds" / SMALL[0]
    html = (bundle / PAGE).read_text()
    spec = json.loads((bundle / "spec.json").read_text())
    manifest = json.loads((bundle / "world.json").read_text())
    own = [t["name"] for t in json.loads((bundle / "pack.json").read_text())["tables"]]
    # two whole diagrams, the domain's own tables first, then the shared modules' (each other's tables as stubs)
    assert html.count('<svg class="er"') == 2 and "<script" not in html
    svgs = re.findall(r'<svg class="er".*?</svg>', html, re.S)
    er = "".join(svgs)
    for table in spec["tables"]:  # a node per table, an edge per foreign key
        assert f"<title>{table['name']}</title>" in svgs[0 if table["name"] in own else 1]
    fks = [(t["name"], c["ref"]) for t in spec["tables"] for c in t["columns"] if c.get("ref")]
    assert fks and er.count('class="edge"') == len(fks)
    assert 'class="scroll" id="er"' not in html and all('style="width:100%;max-width:' in svg for svg in svgs)
    assert html.count('class="plot"') == 2 and html.count('<details class="tbl">') == len(spec["tables"])
    for tool in json.loads((bundle / "tools.json").read_text()):
        assert f"<td>{tool['name']}</td>" in html
    for family in manifest["task_families"]:
        assert f"<summary>{family} (" in html
    for name, digest in manifest["files"].items():
        if name != PAGE:
            assert f"<td>{name}</td><td>{digest}</td>" in html
    assert str(manifest["generation_seed"]) in html and "mutant kind" in html and "A sample trace" in html
    assert not EXTERNAL.search(html)
    dot = page_mod.er_dot(page_mod.parsed_spec((bundle / "spec.json").read_bytes()), own)
    full = re.findall(r'^  "(\w+)" \[label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="2">',
                      dot, re.M)
    assert own and sorted(full) == sorted(own)  # the domain's diagram: its own tables whole, others as stubs
    # the tools collapsed, one group per table, the domain's tables first
    groups = re.findall(r'<details class="tools"><summary>(\w+) \((\d+) tools', html)
    names = [g for g, _ in groups]
    mine = [t for t in own if t in names]
    assert mine and names[:len(mine)] == mine
    assert sum(int(n) for _, n in groups) == len(json.loads((bundle / "tools.json").read_text()))
    # every task: its oracle plan and gold diff, collapsed; and a link back to the catalog site
    gold = json.loads((bundle / "verifiers.json").read_text())["tasks"]
    tasks = [json.loads(line) for line in (bundle / "tasks.jsonl").read_text().splitlines() if line]
    served = [t for t in tasks if t["task_id"] in gold]
    assert html.count('<details class="task">') == len(served) and "<details open" not in html
    for task in served:
        block = html[html.index(f'<details class="task"><summary><code>{task["task_id"]}</code>'):]
        block = block[:block.index("</details>")]
        first_call = task["oracle"][0]
        assert f"{first_call['tool']}(" in block and f"({len(task['oracle'])} calls" in block
        updated = [(table, key, col, value) for table, change in gold[task["task_id"]]["diff"].items()
                   for key, cols in change.get("updated", {}).items() for col, value in cols.items()]
        if updated and len(updated) <= page_mod.DIFF_SHOWN:
            table, key, col, value = updated[0]
            assert f"{table} #{key}: " in block and f"{col}={json.dumps(value)}" in block
    assert f'<a href="{page_mod.SITE_INDEX}">' in html


def test_the_page_shows_the_gold_diff_the_verifier_holds(built: Path, tmp_path: Path) -> None:
    """The plan and diff come from the bundle's tasks.jsonl and verifiers.json: a changed gold diff shows."""
    bundle = tmp_path / "w"
    shutil.copytree(built / "worlds" / SMALL[0], bundle)
    verifiers = json.loads((bundle / "verifiers.json").read_text())
    task_id, entry = next((t, e) for t, e in sorted(verifiers["tasks"].items())
                          if any(c.get("updated") for c in e["diff"].values()))
    table = next(t for t, c in sorted(entry["diff"].items()) if c.get("updated"))
    key = sorted(entry["diff"][table]["updated"], key=lambda k: (len(k), k))[0]
    entry["diff"][table]["updated"][key] = {"planted_column": "planted-value"}
    (bundle / "verifiers.json").write_text(json.dumps(verifiers))
    html = bundle_page(bundle, STAGE_NAMES)
    block = html[html.index(f'<details class="task"><summary><code>{task_id}</code>'):]
    assert f'{table} #{key}: planted_column="planted-value"' in block[:block.index("</details>")]


def test_strings_from_the_world_are_escaped(built: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "w"
    shutil.copytree(built / "worlds" / SMALL[0], bundle)
    spec = json.loads((bundle / "spec.json").read_text())
    spec["brief"]["company_name"] = '<script>alert(1)</script>"Acme"'
    spec["tables"][0]["description"] = '<img src="http://example.com/x.png">'
    spec["rules"][0]["label"] = "<b>limit</b>"
    (bundle / "spec.json").write_text(json.dumps(spec))
    html = bundle_page(bundle, STAGE_NAMES)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;Acme&quot;" in html
    assert "<img" not in html and "<b>limit</b>" not in html and not EXTERNAL.search(html)


def test_a_missing_graphviz_names_the_package(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_mod.shutil, "which", lambda name: None)
    with pytest.raises(PageError, match="graphviz"):
        bundle_page(built / "worlds" / SMALL[0], STAGE_NAMES)


def test_the_site_lists_every_world_with_filters_and_plots(built: Path, tmp_path: Path) -> None:
    files = site_files(built)
    assert set(files) == {"index.html", *(f"worlds/{w}.html" for w in SMALL)}
    for wid in SMALL:
        assert files[f"worlds/{wid}.html"] == (built / "worlds" / wid / PAGE).read_bytes()
    index = files["index.html"].decode()
    for wid in SMALL:
        assert f'href="worlds/{wid}.html"' in index
    assert index.count('class="plot"') == 5 and not EXTERNAL.search(index)
    # offline builds cost $0: the cost plot shows each world's CPU seconds, as the costs catalog has them
    assert "Cost per world: CPU seconds (model cost $0)" in index
    for wid, _usd, _wall, cpu in catalog_data(built)["world_cost"]:
        assert cpu > 0 and f"{wid}: {cpu:.1f} s</title>" in index
    paid = cost_plot([("a--v001", 0.25, 3.0, 2.0), ("b--v001", 0.0, 1.0, 1.0)])
    assert "Cost per world (USD)" in paid and "a--v001: $0.2500</title>" in paid
    for wid in SMALL:  # each world page's link back lands on the site's index
        assert posixpath.normpath(posixpath.join(f"worlds/{wid}.html", "..", page_mod.SITE_INDEX)) == "index.html"
    for ident in ("f-domain", "f-company", "f-family"):
        assert f'id="{ident}"' in index
    written = export(built, tmp_path / "site")
    assert sorted(p.relative_to(tmp_path / "site").as_posix() for p in written) == sorted(files)
    server = make_server(built, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert server.server_address[0] == "127.0.0.1"
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert urllib.request.urlopen(f"{url}/").read() == files["index.html"]
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{url}/../world.json")
    finally:
        server.shutdown()
        server.server_close()


def test_bundle_metadata_links_the_page_and_summarises() -> None:
    from worldfactory_dagster.assets.stage import report_metadata
    from worldfactory_dagster.resources.world_store import WorldStore

    report = StageReport(world_id=SMALL[0], stage="world_bundle", files={PAGE: "ab", "world.json": "cd"},
                         counts={"files": 15, "bytes": 1000}, cost=StageCost(wall_seconds=1.5))
    meta = report_metadata(report, WorldStore(root="/tmp/wf-data"))
    assert meta["page"].url == f"file:///tmp/wf-data/worlds/{SMALL[0]}/{PAGE}"
    assert "| files | 15 |" in meta["summary"].md_str and "| wall seconds | 1.50 |" in meta["summary"].md_str


@needs_chromium
def test_chromium_renders_the_page_and_the_site_offline(built: Path, tmp_path: Path) -> None:
    page = built / "worlds" / SMALL[0] / PAGE
    dom = chromium("--dump-dom", page.as_uri(), tmp=tmp_path).stdout
    assert dom.count('<svg class="er"') == 2 and dom.count('class="plot"') == 2 and "<table" in dom
    shot = tmp_path / "world-page.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri(), tmp=tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # laid out by Chromium: the whole diagram within the page's width and its own box (nothing scrolled out
    # of sight), the domain's box above the shared modules', and the tools and tasks collapsed
    layout = measure(page, tmp_path, """
      var svgs = Array.from(d.querySelectorAll('svg.er')), box = d.getElementById('er');
      var r = svgs.map(function (s) { return s.getBoundingClientRect(); });
      var rows = Array.from(d.querySelectorAll('details.tools table, details.task pre'));
      return {right: Math.max.apply(null, r.map(function (x) { return x.right; })),
              page: d.documentElement.clientWidth, height: r[0].height + r[1].height,
              box: box.clientHeight, scroll: box.scrollHeight, tops: r.map(function (x) { return x.top; }),
              first: Array.from(svgs[0].querySelectorAll('g.node > title')).map(function (t) {
                return t.textContent; }),
              shown: rows.filter(function (e) { return e.checkVisibility(); }).length, rows: rows.length,
              back: d.querySelector('header a').getAttribute('href')};""")
    assert layout["right"] <= layout["page"] and layout["height"] > 400, layout
    assert layout["scroll"] <= layout["box"] + 1, layout  # the box shows the whole drawings
    own = [t["name"] for t in json.loads((built / "worlds" / SMALL[0] / "pack.json").read_text())["tables"]]
    assert layout["tops"][0] < layout["tops"][1] and set(own) <= set(layout["first"]), layout
    assert layout["rows"] > 0 and layout["shown"] == 0, layout
    assert layout["back"] == page_mod.SITE_INDEX

    # the site over loopback: the only requests the server sees are the page's own (and a favicon)
    seen: list[str] = []
    server = make_server(built, port=0)
    handler = server.RequestHandlerClass
    original = handler.do_GET

    def recording(self: object) -> None:
        seen.append(self.path)  # type: ignore[attr-defined]
        original(self)  # type: ignore[arg-type]

    handler.do_GET = recording  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        dom = chromium("--dump-dom", url, tmp=tmp_path).stdout
        shot = tmp_path / "catalog-site.png"
        chromium(f"--screenshot={shot}", "--window-size=1280,1400", url, tmp=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    assert dom.count('class="plot"') == 5 and 'id="worlds"' in dom
    assert all(SMALL[i] in dom for i in range(len(SMALL)))
    assert set(seen) <= {"/", "/favicon.ico"} and "/" in seen
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

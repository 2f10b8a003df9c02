"""The world page (index.html in every bundle, `worldfactory page`) and the catalog site (`worldfactory site`),
looked at in headless Chromium (Debian package `chromium`) with every host name unresolvable."""

from __future__ import annotations

import json
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
from worldfactory.site import export, make_server, site_files
from worldfactory.stages.core import StageCost, StageReport
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian package `chromium`) "
                                                              "is not installed; .ci/run installs it")
# a URL to anything but this machine, in src/href/url()/@import
EXTERNAL = re.compile(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""",
                      re.I)


@pytest.fixture(scope="module")
def built(small_data: Path) -> Path:
    return small_data


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
    assert bundle_page(bundle).encode() == raw
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
    assert html.count('<svg class="er"') == 1 and "<script" not in html
    er = html[html.index('<svg class="er"'):]
    er = er[:er.index("</svg>")]
    for table in spec["tables"]:  # a node per table, an edge per foreign key
        assert f"<title>{table['name']}</title>" in er
    fks = [(t["name"], c["ref"]) for t in spec["tables"] for c in t["columns"] if c.get("ref")]
    assert fks and er.count('class="edge"') == len(fks)
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


def test_strings_from_the_world_are_escaped(built: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "w"
    shutil.copytree(built / "worlds" / SMALL[0], bundle)
    spec = json.loads((bundle / "spec.json").read_text())
    spec["brief"]["company_name"] = '<script>alert(1)</script>"Acme"'
    spec["tables"][0]["description"] = '<img src="http://example.com/x.png">'
    spec["rules"][0]["label"] = "<b>limit</b>"
    (bundle / "spec.json").write_text(json.dumps(spec))
    html = bundle_page(bundle)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;Acme&quot;" in html
    assert "<img" not in html and "<b>limit</b>" not in html and not EXTERNAL.search(html)


def test_a_missing_graphviz_names_the_package(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_mod.shutil, "which", lambda name: None)
    with pytest.raises(PageError, match="graphviz"):
        bundle_page(built / "worlds" / SMALL[0])


def test_the_site_lists_every_world_with_filters_and_plots(built: Path, tmp_path: Path) -> None:
    files = site_files(built)
    assert set(files) == {"index.html", *(f"worlds/{w}.html" for w in SMALL)}
    for wid in SMALL:
        assert files[f"worlds/{wid}.html"] == (built / "worlds" / wid / PAGE).read_bytes()
    index = files["index.html"].decode()
    for wid in SMALL:
        assert f'href="worlds/{wid}.html"' in index
    assert index.count('class="plot"') == 5 and not EXTERNAL.search(index)
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
    assert dom.count('<svg class="er"') == 1 and dom.count('class="plot"') == 2 and "<table" in dom
    shot = tmp_path / "world-page.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri(), tmp=tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

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

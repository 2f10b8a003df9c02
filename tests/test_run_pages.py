"""Evaluation runs on the pages: the catalog site's and the world page's runs section (pass rate per family per
run, causes as a bar chart, links to example episodes), the episode pages, and headless Chromium offline."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.test_world_page import CHROMIUM, EXTERNAL, chromium, needs_chromium
from worldfactory.catalog import publish_world_rows
from worldfactory.cli import main
from worldfactory.confine import open_world
from worldfactory.evals import runs
from worldfactory.evals.pages import episode_href
from worldfactory.evals.summary import load_summary
from worldfactory.generate.bundle import sha256
from worldfactory.generate.page import PAGE
from worldfactory.rollouts import RolloutConfig
from worldfactory.site import export, site_files

WORLD = "commerce-operations.startup--v001"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, worlds_dir: Path) -> Path:
    """One example world, its catalog rows, and two runs of weak policies on some of its tasks."""
    root = tmp_path_factory.mktemp("run-pages")
    shutil.copytree(worlds_dir / WORLD, root / "worlds" / WORLD)
    publish_world_rows(root / "catalog", root / "worlds" / WORLD)
    world = open_world(root / "worlds" / WORLD)
    tasks = [t.task_id for fam in ("workflow", "conditional", "lookup_act", "retrieval")
             for t in [x for x in world.tasks.values() if x.family == fam][:4]]
    for policy in ("first_write", "name_confuser"):
        runs.execute(root, [root / "worlds" / WORLD], RolloutConfig(policy=policy, k=4), tasks, open_world,
                     name=f"{policy}-pages")
    return root


def test_the_site_shows_each_run_with_families_causes_and_example_links(data: Path) -> None:
    files = site_files(data)
    index = files["index.html"].decode()
    page = files[f"worlds/{WORLD}.html"].decode()
    for rid in ("first_write-pages", "name_confuser-pages"):
        s = load_summary(runs.run_dir(data, rid))
        assert s is not None and s.causes
        for html in (index, page):
            assert f"{rid}: pass rate per family" in html and f"{rid}: failures by cause" in html
        for cause, e in s.examples.items():
            href = episode_href(rid, e.world_id, e.task_id, e.rollout)
            assert f'href="{href}"' in index and f'href="../{href}"' in page  # each link has its page
            episode = files[href].decode()
            assert f"Cause: <b>{cause}</b>" in episode and e.task_id in episode
            assert f'href="../../worlds/{WORLD}.html"' in episode
    assert load_summary(runs.run_dir(data, "first_write-pages")).top_cause == "gave_up"  # type: ignore[union-attr]
    assert re.search(r"<td>workflow</td><td>\d+%", page)  # pass rate per family per run, in the table too
    for html in files.values():
        assert not EXTERNAL.search(html.decode())
    # the bundle's own page is still the bundle's bytes; the site's copy adds the runs section
    raw = (data / "worlds" / WORLD / PAGE).read_bytes()
    assert (data / "worlds" / WORLD / "world.json").read_text().count(sha256(raw)) == 1
    assert 'id="runs"' not in raw.decode() and page.startswith(raw.decode()[: raw.decode().rfind("</main>")])


def test_world_page_command_adds_the_runs_it_played(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    assert main(["page", WORLD, "--data", str(data), "--out", str(out)]) == 0
    html = out.read_text()
    assert 'id="runs"' in html and "first_write-pages" in html and "name_confuser-pages" in html
    other = tmp_path / "other"
    shutil.copytree(data / "worlds", other / "worlds")
    assert main(["page", WORLD, "--data", str(other), "--out", str(tmp_path / "plain.html")]) == 0
    assert (tmp_path / "plain.html").read_bytes() == (data / "worlds" / WORLD / PAGE).read_bytes()  # no runs


@needs_chromium
def test_chromium_renders_the_runs_and_follows_an_example_link(data: Path, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    site = tmp_path / "site"
    export(data, site)
    dom = chromium("--dump-dom", (site / "index.html").as_uri(), tmp=tmp_path).stdout
    assert dom.count('class="plot"') == 5 + 2 * 2 and 'id="runs"' in dom and 'class="runs"' in dom
    href = re.search(r'<ul class="examples"><li><a href="([^"]+)"', dom)
    assert href is not None
    episode = chromium("--dump-dom", (site / href.group(1)).as_uri(), tmp=tmp_path).stdout
    assert "Cause:" in episode and '<table class="trace">' in episode
    world = chromium("--dump-dom", (site / "worlds" / f"{WORLD}.html").as_uri(), tmp=tmp_path).stdout
    assert world.count('<svg class="er"') == 2 and world.count('class="plot"') == 2 + 2 * 2
    shot = tmp_path / "runs.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,2400", (site / "index.html").as_uri(), tmp=tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

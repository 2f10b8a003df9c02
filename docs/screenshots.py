"""The screenshots of docs/worlds.md, from the worlds built now: docs/world-page.png and docs/catalog-site.png.

`make screenshots` builds the example worlds (if not current) and runs this: a world's page (its
bundle's index.html) and the catalog site (a static export of `worldfactory site`) in headless
Chromium, with every host name unresolvable as in tests/test_world_page.py. Run it again whenever
the page, the site or the examples change, and commit the two PNGs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from worldfactory.data_root import data_root, resolve_world
from worldfactory.generate.page import PAGE
from worldfactory.site import export
from worldfactory.templates import load_templates

WORLD_PAGE = ("world-page.png", "1280,1800")  # file name, window size
CATALOG_SITE = ("catalog-site.png", "1280,1300")


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        sys.exit("error: headless Chromium is needed (Debian package `chromium`: apt-get install chromium)")
    return found


def screenshot(url: str, dest: Path, size: str, profile: Path) -> None:
    cmd = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
           "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
           f"--screenshot={dest}", f"--window-size={size}", url]
    subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)
    if not dest.is_file() or dest.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"error: Chromium wrote no PNG to {dest}")


def render(root: Path, world: str, out: Path) -> list[Path]:
    """Both screenshots into `out`; the world page is `world`'s (a world ID under root, or a bundle folder)."""
    bundle = resolve_world(world, root)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wf-screenshots-") as tmp:
        site = Path(tmp) / "site"
        export(root, site)
        shots = [(bundle / PAGE, *WORLD_PAGE), (site / "index.html", *CATALOG_SITE)]
        for page, name, size in shots:
            screenshot(page.resolve().as_uri(), out / name, size, Path(tmp) / "profile")
    return [out / name for _page, name, _size in shots]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", help="data root with the built worlds (default $WORLDFACTORY_DATA, else data/)")
    p.add_argument("--world", help="the world whose page is shown (default: the catalog's first example)")
    p.add_argument("--out", default="docs", help="folder for the PNGs")
    args = p.parse_args(argv)
    world = args.world or load_templates().catalog.examples[0]
    for path in render(data_root(args.data), world, Path(args.out)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Split README.md into a front page and reference pages under docs/, section by section, verbatim.

The README keeps its opening (what WorldFactory is) and "First two commands", and gains "Where to read
next"; every other `## ` section, with its `### ` subsections, moves unchanged into the docs/ page that
PAGES names for it. Links are rewritten for the new place: `](docs/x)` becomes `](x)`, another relative
link gets `../`, and `](#anchor)` points at the page that now holds the anchor. A `## ` section that PAGES
does not name stops the script (name it there), so a section added to the README is never dropped.

Run it from the repository root after merging README changes: `python scripts/split_readme.py`. It
reads the README as merged (the long one); run on an already split README it only checks that no
new section was added to it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEEP = ("First two commands",)  # the README's own sections, besides its opening
# docs page -> (its title, what it holds in a line, the README sections it takes, in their README order); a
# page of one section takes that section's heading as its title
PAGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "cli.md": ("The command line and the Python API", "every command, with examples; the Python API",
               ("The command line", "Python API")),
    "dagster.md": ("The Dagster pipeline", "assets, checks, partitions, the sensor, nightly rebuilds, backfills",
                   ("The Dagster pipeline",)),
    "briefs.md": ("From text to world", "a free-text brief whose domain pack a model drafts",
                  ("From text to world: a brief drafted by a model",)),
    "catalogs.md": ("Catalogs", "the Parquet catalogs, DuckDB queries, the catalog at scale", ("Catalogs",)),
    "worlds.md": ("World bundles", "what a bundle holds, the world's page and the catalog site",
                  ("A world bundle", "Looking at worlds: the page and the catalog site")),
    "sandbox.md": ("Running generated code", "the OS boundary around generated tool code",
                   ("Running generated code: the sandbox",)),
    "tasks.md": ("Tasks, verifiers and rollouts", "task families, state verifiers, the pass band, evaluation runs",
                 ("Tasks and verifiers", "Rollouts and the pass band")),
    "serving.md": ("Serving worlds to trainers", "MCP over HTTP, the control plane, the environment, RL adapters",
                   ("Serving worlds to trainers",)),
    "images.md": ("Worlds as container images", "world images, the runtime image, scale-out",
                  ("Worlds as container images",)),
    "building.md": ("How a world is built", "stages, generators and the templates they read",
                    ("How a world is built",)),
    "bench.md": ("Benchmarks", "how to run them (`make bench`); the results are in benchmarks.md",
                 ("Benchmarks",)),
}
# Pages that were under docs/ already, listed on the front page after the moved ones.
OTHER_READING = (
    ("docs/architecture.md", "the layers, a world ID's way from the CLI to a published bundle, the stages"),
    ("docs/decisions.md", "why the code is the way it is"),
    ("docs/benchmarks.md", "the benchmark log, session by session"),
    ("world_templates/README.md", "the pack author's reference: every key of a domain pack"),
    ("deploy/README.md", "PostgreSQL, a run queue and runs in containers on several machines"),
)
NEXT = "Where to read next"


def sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The text before the first `## ` heading, and each `## ` section (title, text with its heading)."""
    parts = re.split(r"(?m)^(?=## )", text)
    head, found = parts[0], []
    fence = False
    merged: list[str] = []
    for part in parts[1:]:  # a `## ` line inside a fenced block is not a heading: glue it back
        if fence and merged:
            merged[-1] += part
        else:
            merged.append(part)
        fence = (merged[-1].count("```") % 2) == 1
    for part in merged:
        found.append((part.splitlines()[0][3:].strip(), part))
    return head, found


def slug(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def relink(text: str, page: str, anchors: dict[str, str]) -> str:
    """Links of text moved from README.md into docs/<page>."""
    def fix(m: re.Match[str]) -> str:
        target = m.group(1)
        if target.startswith("#"):
            where = anchors.get(target[1:])
            return f"]({target})" if where in (None, page) else f"]({where}{target})"
        if re.match(r"[a-z]+:", target):
            return m.group(0)
        return f"]({target.removeprefix('docs/')})" if target.startswith("docs/") else f"](../{target})"
    return re.sub(r"\]\(([^)\s]+)\)", fix, text)


def promote(text: str) -> str:
    """Every heading one level up (`## ` to `# `), code blocks left alone."""
    out, fence = [], False
    for line in text.splitlines(keepends=True):
        fence ^= line.startswith("```")
        out.append(line[1:] if not fence and re.match(r"#{2,6} ", line) else line)
    return "".join(out)


def front_page(head: str, kept: list[str]) -> str:
    lines = [f"- [docs/{name}](docs/{name}): {what}" for name, (_, what, _) in PAGES.items()]
    lines += [f"- [{path}]({path}): {what}" for path, what in OTHER_READING]
    return head + "".join(kept) + f"## {NEXT}\n\n" + "\n".join(lines) + "\n"


def split(root: Path = ROOT) -> list[Path]:
    readme = root / "README.md"
    head, found = sections(readme.read_text())
    taken = {title: name for name, (_, _, titles) in PAGES.items() for title in titles}
    unknown = [t for t, _ in found if t not in taken and t not in KEEP and t != NEXT]
    if unknown:
        raise SystemExit(f"README.md: no docs page for section(s) {unknown}: add them to PAGES in {__file__}")
    moved = [t for t, _ in found if t in taken]
    if not moved:
        return []  # split already: nothing new to move
    anchors: dict[str, str] = {}
    for title, text in found:
        for line in text.splitlines():
            if line.startswith("## ") or line.startswith("### "):
                anchors[slug(line.lstrip("#").strip())] = taken.get(title, "../README.md")
    written = []
    for name, (title, _, titles) in PAGES.items():
        body = "".join(relink(text, name, anchors) for t, text in found if t in titles)
        if not body:
            raise SystemExit(f"README.md has none of {titles} for docs/{name}")
        path = root / "docs" / name
        if len(titles) == 1:  # one section: its heading is the page's title, its subsections one level up
            path.write_text(f"{promote(body).rstrip()}\n")
        else:
            path.write_text(f"# {title}\n\n{body.rstrip()}\n")
        written.append(path)
    kept = [text for t, text in found if t in KEEP]
    readme.write_text(front_page(head, kept))
    return written


if __name__ == "__main__":
    for path in split():
        print(path.relative_to(ROOT))
    sys.exit(0)

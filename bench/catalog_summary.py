"""The catalog at a glance, for the notes and the README: one summary row, then one row per pack.

Reads the Parquet catalogs of a data root with DuckDB (the same views as `worldfactory query`).
Curated tasks are served tasks whose rollouts split (0 < pass rate < 1). Then how many worlds meet
each of the per-world floors the pack tests hold v001 to (the caught-mutant rate and the task
families come from each bundle's world.json), and bundle disk use.
The realism audit's counts (worldfactory/audit.py; blocking in the build, so 0 in a published world) are
columns of both tables: over the seed and over the end state of every oracle plan.
Usage: python bench/catalog_summary.py [DATA_ROOT] [--docs docs/catalogs.md]   (default: data/)
With --docs, the summary and per-pack tables in that file are rewritten from the catalog (the lines
under the headers `| worlds | seed types |` and `| pack |`); the rest of the file is kept.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from worldfactory.catalog import query

SUMMARY = """
WITH rates AS (SELECT world_id, task_id, avg(reward) AS rate FROM rollouts GROUP BY world_id, task_id),
     curated AS (SELECT t.world_id, count(*) AS n FROM tasks t JOIN rates r USING (world_id, task_id)
                 WHERE r.rate > 0 AND r.rate < 1 GROUP BY t.world_id),
     served AS (SELECT world_id, count(*) AS n FROM tasks GROUP BY world_id)
SELECT count(*) AS worlds, count(DISTINCT seed_type) AS seed_types, sum(s.n) AS tasks,
       sum(coalesce(c.n, 0)) AS curated_tasks, round(avg(tables), 1) AS mean_tables,
       round(avg(tools), 1) AS mean_tools, count(DISTINCT schema_sha256) AS distinct_schemas,
       count(DISTINCT (schema_sha256, tool_set_sha256)) AS distinct_schema_tool_pairs,
       count(DISTINCT company_name) AS distinct_company_names, min(coverage) AS min_coverage,
       sum(oracle_pass) = sum(s.n) AS every_oracle_passes, sum(null_pass) AS null_passes,
       sum(audit_seed_violations) AS audit_seed_violations, sum(audit_oracle_violations) AS audit_oracle_violations
FROM worlds w JOIN served s USING (world_id) LEFT JOIN curated c USING (world_id)
"""

PER_PACK = """
WITH rates AS (SELECT world_id, task_id, avg(reward) AS rate FROM rollouts GROUP BY world_id, task_id),
     curated AS (SELECT t.world_id, count(*) AS n FROM tasks t JOIN rates r USING (world_id, task_id)
                 WHERE r.rate > 0 AND r.rate < 1 GROUP BY t.world_id),
     served AS (SELECT world_id, count(*) AS n FROM tasks GROUP BY world_id)
SELECT domain AS pack, count(*) AS worlds, round(avg(tables), 1) AS tables, round(avg(tools), 1) AS tools,
       round(avg(s.n), 1) AS tasks, round(avg(coalesce(c.n, 0)), 1) AS curated, round(avg(coverage), 3) AS coverage,
       sum(audit_seed_violations) AS audit_seed, sum(audit_oracle_violations) AS audit_oracle_ends
FROM worlds w JOIN served s USING (world_id) LEFT JOIN curated c USING (world_id)
GROUP BY domain ORDER BY domain
"""


FLOORS = """
WITH longest AS (SELECT world_id, max(oracle_steps) AS steps FROM tasks GROUP BY world_id)
SELECT world_id, tables >= 20, rows >= 2000, tools >= 37, tasks >= 100, l.steps >= 1000, coverage >= 0.95,
       oracle_pass = tasks AND null_pass = 0
FROM worlds JOIN longest l USING (world_id) ORDER BY world_id
"""
FLOOR_NAMES = ["20 tables", "2,000 rows", "37 tools", "100 tasks", "a 1,000-call task", "coverage 0.95",
               "oracle 1, null 0", "6 families", "caught rate 1.0"]


def floors(root: Path) -> tuple[list[str], list[tuple]]:
    """Per floor: how many worlds meet it, and the first few that do not."""
    met: dict[str, list[str]] = {name: [] for name in FLOOR_NAMES}
    missed: dict[str, list[str]] = {name: [] for name in FLOOR_NAMES}
    for world_id, *checks in query(root, FLOORS)[1]:
        manifest = json.loads((root / "worlds" / world_id / "world.json").read_text())
        checks += [len(manifest["task_families"]) >= 6, manifest["verifier_validity"]["caught_rate"] >= 1.0]
        for name, ok in zip(FLOOR_NAMES, checks, strict=True):
            (met if ok else missed)[name].append(world_id)
    return ["floor", "worlds meeting it", "worlds missing it"], [
        (name, len(met[name]), ", ".join(missed[name][:3]) + (" ..." if len(missed[name]) > 3 else ""))
        for name in FLOOR_NAMES]


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(columns: list[str], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(c.replace("_", " ") for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


DOC_TABLES = ("| worlds | seed types |", "| pack |")  # how the two tables' headers begin in the docs


def rewrite_docs(text: str, summary: str, per_pack: str) -> str:
    """`text` with each table whose header begins as DOC_TABLES replaced by the new one (ValueError if absent)."""
    lines = text.split("\n")
    for start, new in zip(DOC_TABLES, (summary, per_pack), strict=True):
        at = next((i for i, x in enumerate(lines) if x.startswith(start)), None)
        if at is None:
            raise ValueError(f"no table whose header begins {start!r}")
        end = at
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[at:end] = new.split("\n")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="The catalog's summary tables (and docs/catalogs.md's, with --docs).")
    parser.add_argument("root", nargs="?", type=Path, default=Path("data"), help="the data root (default: data/)")
    parser.add_argument("--docs", type=Path, help="a Markdown file whose summary tables to rewrite in place")
    ns = parser.parse_args()
    root, docs = ns.root, ns.docs
    summary, per_pack = table(*query(root, SUMMARY)), table(*query(root, PER_PACK))
    if docs is not None:
        docs.write_text(rewrite_docs(docs.read_text(), summary, per_pack))
    print(summary)
    print()
    print(per_pack)
    print()
    print(table(*floors(root)))
    worlds = subprocess.run(["du", "-sb", str(root / "worlds")], capture_output=True, text=True).stdout.split()[0]
    catalog = subprocess.run(["du", "-sb", str(root / "catalog")], capture_output=True, text=True).stdout.split()[0]
    n = len(list((root / "worlds").glob("*/world.json")))
    print(f"\nbundles: {int(worlds) / 1e9:.2f} GB ({int(worlds) / max(n, 1) / 1e6:.2f} MB a world); "
          f"catalog: {int(catalog) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

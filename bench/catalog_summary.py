"""The catalog at a glance, for the notes and the README: one summary row, then one row per pack.

Reads the Parquet catalogs of a data root with DuckDB (the same views as `worldfactory query`).
Curated tasks are served tasks whose rollouts split (0 < pass rate < 1). Also prints bundle disk use.
Usage: python bench/catalog_summary.py [DATA_ROOT]   (default: data/)
"""

from __future__ import annotations

import subprocess
import sys
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
       sum(oracle_pass) = sum(s.n) AS every_oracle_passes, sum(null_pass) AS null_passes
FROM worlds w JOIN served s USING (world_id) LEFT JOIN curated c USING (world_id)
"""

PER_PACK = """
WITH rates AS (SELECT world_id, task_id, avg(reward) AS rate FROM rollouts GROUP BY world_id, task_id),
     curated AS (SELECT t.world_id, count(*) AS n FROM tasks t JOIN rates r USING (world_id, task_id)
                 WHERE r.rate > 0 AND r.rate < 1 GROUP BY t.world_id),
     served AS (SELECT world_id, count(*) AS n FROM tasks GROUP BY world_id)
SELECT domain, count(*) AS worlds, round(avg(tables), 1) AS tables, round(avg(tools), 1) AS tools,
       round(avg(s.n), 1) AS tasks, round(avg(coalesce(c.n, 0)), 1) AS curated, round(avg(coverage), 3) AS coverage
FROM worlds w JOIN served s USING (world_id) LEFT JOIN curated c USING (world_id)
GROUP BY domain ORDER BY domain
"""


def table(columns: list[str], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "data")
    print(table(*query(root, SUMMARY)))
    print()
    print(table(*query(root, PER_PACK)))
    worlds = subprocess.run(["du", "-sb", str(root / "worlds")], capture_output=True, text=True).stdout.split()[0]
    catalog = subprocess.run(["du", "-sb", str(root / "catalog")], capture_output=True, text=True).stdout.split()[0]
    n = len(list((root / "worlds").glob("*/world.json")))
    print(f"\nbundles: {int(worlds) / 1e9:.2f} GB ({int(worlds) / max(n, 1) / 1e6:.2f} MB a world); "
          f"catalog: {int(catalog) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

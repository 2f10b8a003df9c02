"""Catalogs: per-world Parquet rows under data/catalog/<table>/world_id=<id>/, and DuckDB views over them.

Each world writes only its own partition folder (replaced whole by one rename), so builds of
different worlds never contend. The views read the Parquet globs at query time: a world built a
second ago is already visible, and a reader never takes a lock that a writer needs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from worldfactory.catalog_files import SCHEMAS, TABLES, write_policy_rows
from worldfactory.spec import Task

PER_POLICY = ("rollouts", "traces")  # one file per policy inside a world's folder


class CatalogError(ValueError):
    """A catalog query that is not allowed or does not run; the message says what to do."""


def _write_partition(catalog_root: Path, table: str, world_id: str, rows: list[dict[str, Any]]) -> Path:
    """Replace one world's partition of one table in a single rename."""
    schema = SCHEMAS[table]
    data = pa.Table.from_pylist(rows, schema=schema)
    final = catalog_root / table / f"world_id={world_id}"
    tmp = catalog_root / ".tmp" / f"{table}-{world_id}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pq.write_table(data, tmp / "part-0.parquet", compression="zstd")
    final.parent.mkdir(parents=True, exist_ok=True)
    old = catalog_root / ".tmp" / f"old-{table}-{world_id}-{os.getpid()}"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def write_world_rows(catalog_root: Path, manifest: dict[str, Any], tasks: list[Task], path: str) -> None:
    """The world's `worlds` and `tasks` rows; `path` is the published bundle (its world.json is hashed)."""
    wid = manifest["world_id"]
    published = Path(path) / "world.json"  # world.json cannot carry its own hash: read it as published
    c, v = manifest["counts"], manifest["verification"]
    world_row = {
        "seed_type": manifest["seed_type"], "domain": manifest["domain"], "company_type": manifest["company_type"],
        "variant": manifest["variant"], "company_name": manifest["company_name"],
        "generation_seed": manifest["generation_seed"], "generator_version": manifest["generator_version"],
        "clock": manifest["clock"], "tables": c["tables"], "rows": c["rows"], "tools": c["tools"],
        "tasks": c["tasks"], "oracle_pass": v["oracle_pass"], "null_pass": v["null_pass"], "path": path,
        "world_json_sha256": hashlib.sha256(published.read_bytes()).hexdigest() if published.is_file() else "",
        "coverage": manifest.get("coverage"), "schema_sha256": manifest.get("schema_sha256", ""),
        "tool_set_sha256": manifest.get("tool_set_sha256", ""),
        "alternatives": manifest.get("verifier_validity", {}).get("alternatives"),
        "alternatives_passed": manifest.get("verifier_validity", {}).get("alternatives_passed"),
        "audit_seed_violations": manifest.get("audit", {}).get("seed_violations"),
        "audit_oracle_violations": manifest.get("audit", {}).get("oracle_end_violations"),
    }
    _write_partition(catalog_root, "worlds", wid, [world_row])
    _write_partition(catalog_root, "tasks", wid, [
        {"task_id": t.task_id, "family": t.family, "instruction": t.instruction, "oracle_steps": len(t.oracle),
         "answer_type": t.answer_type, "target": t.target,
         **{f"difficulty_{k}": v for k, v in t.difficulty.model_dump().items()}} for t in tasks
    ])


def publish_world_rows(catalog_root: Path, bundle: Path, traces: list[dict[str, Any]] | None = None) -> None:
    """Every catalog row of a published world, from its bundle alone: worlds, tasks, rollouts, traces.

    The bundle stage calls this once, after the rename that publishes the world; rebuild_catalog
    calls it for every bundle and gives the same rows. Costs are the exception: they record what
    the build spent, stage by stage, failed worlds included (write_cost_rows). `traces`: the bundle's
    traces file, already read (traces_file_lines), by a caller that needs it too.
    """
    import json

    from worldfactory.rollouts import read_traces_file, traces_file_lines
    from worldfactory.runtime.world import load_json, parsed_tasks

    manifest = json.loads((bundle / "world.json").read_text())
    served = set(load_json((bundle / "verifiers.json").read_bytes())["tasks"])
    tasks = list(parsed_tasks((bundle / "tasks.jsonl").read_bytes()))
    write_world_rows(catalog_root, manifest, [t for t in tasks if t.task_id in served], str(bundle))
    if traces is None:
        traces = traces_file_lines((bundle / "traces.jsonl.gz").read_bytes())
    rollouts, steps = read_traces_file(traces)
    wid = manifest["world_id"]
    for table, rows in (("rollouts", rollouts), ("traces", steps)):
        for policy in sorted({r["policy"] for r in rows}):
            write_policy_rows(catalog_root, table, wid, policy, [r for r in rows if r["policy"] == policy])
    from worldfactory.evals.runs import BUILD_BAND, build_band_rows

    label = ",".join(sorted({r["policy"] for r in rollouts}))  # the build's reference policy
    write_policy_rows(catalog_root, "bands", wid, BUILD_BAND, build_band_rows(bundle, label))


def record_failed_build(data_root: Path, world_id: str, stage: str, check: str, reason: str, inputs: str) -> bool:
    """Mark the world's build as failed in the catalog (`failed_builds`); whether a bundle published before
    stays (the failed build did not replace it)."""
    kept = data_root / "worlds" / world_id / "world.json"
    sha = hashlib.sha256(kept.read_bytes()).hexdigest() if kept.is_file() else ""
    _write_partition(data_root / "catalog", "failed_builds", world_id, [
        {"stage": stage, "check_name": check, "reason": reason[:2000], "inputs": inputs,
         "kept_world_json_sha256": sha}])
    return bool(sha)


def clear_failed_build(data_root: Path, world_id: str) -> None:
    """A build published the world: its earlier failed attempt is no longer the last word."""
    shutil.rmtree(data_root / "catalog" / "failed_builds" / f"world_id={world_id}", ignore_errors=True)


def rebuild_catalog(data_root: Path) -> list[str]:
    """The worlds, tasks, rollouts, traces and bands catalogs again, from the published bundles alone, and
    the evaluation runs' rows from their run folders (data/runs/)."""
    built = []
    for bundle in sorted((data_root / "worlds").glob("*/world.json")):
        for table in ("worlds", "tasks", "rollouts", "traces"):
            shutil.rmtree(data_root / "catalog" / table / f"world_id={bundle.parent.name}", ignore_errors=True)
        publish_world_rows(data_root / "catalog", bundle.parent)
        built.append(bundle.parent.name)
    from worldfactory.evals.runs import rebuild_runs

    rebuild_runs(data_root)  # and every evaluation run's rows, from its run folder
    return built


def write_cost_rows(catalog_root: Path, world_id: str, costs: dict[str, Any]) -> None:
    """One row per stage that has run for this world (a failed world's spend is still recorded)."""
    rows = [{"stage": stage, **cost.model_dump()} for stage, cost in sorted(costs.items())]
    _write_partition(catalog_root, "costs", world_id, rows)


def read_world_rows(catalog_root: Path, table: str, world_id: str, policy: str | None = None) -> list[dict[str, Any]]:
    folder = catalog_root / table / f"world_id={world_id}"
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.parquet")):
        rows += pq.ParquetFile(path).read().to_pylist()  # not read_table: its dataset layer imports pandas
    return [r for r in rows if policy is None or r.get("policy") == policy]


def remove_world_rows(catalog_root: Path, world_id: str) -> list[Path]:
    removed = []
    for table in TABLES:
        folder = catalog_root / table / f"world_id={world_id}"
        if folder.exists():
            shutil.rmtree(folder)
            removed.append(folder)
    return removed


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_unsigned_integer(t):
        return "UBIGINT"
    return "BIGINT" if t.bit_width == 64 else "INTEGER"


def create_views(con: Any, catalog_root: Path, relative: bool = False) -> None:
    """A view per catalog table over its Parquet glob; an empty, typed view when nothing is built yet.

    With `relative`, the globs are relative to the data root, the catalog folder's parent
    (`catalog/<table>/...`), so a DuckDB file holding these views keeps working when the data folder
    moves; DuckDB resolves them against its `file_search_path` (set here while the views are made)
    or else the working directory.
    """
    if relative:
        con.execute(f"SET file_search_path = {_sql_text(str(catalog_root.resolve().parent))}")
    for table, schema in SCHEMAS.items():
        folder = (catalog_root / table).resolve()
        if any(folder.glob("world_id=*/*.parquet")):
            where = Path(catalog_root.name, table) if relative else folder
            glob = _sql_text((where / "world_id=*" / "*.parquet").as_posix())
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet({glob}, "
                        f"hive_partitioning = true, hive_types = {{'world_id': VARCHAR}}, union_by_name = true)")
        else:
            cols = ", ".join(f"CAST(NULL AS {_duck_type(f.type)}) AS {f.name}" for f in schema)
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT {cols}, CAST(NULL AS VARCHAR) AS world_id "
                        f"WHERE false")


def _sql_text(text: str) -> str:
    """A SQL string literal (DuckDB's SET and read_parquet take no bound parameters)."""
    return "'" + text.replace("'", "''") + "'"


def catalog_path(data_root: Path) -> Path:
    """The DuckDB file of views over the Parquet catalog."""
    return data_root / "catalog.duckdb"


def refresh_database(data_root: Path) -> Path:
    """Rewrite data/catalog.duckdb with the views (written beside, then renamed: one writer, no torn file).

    The views name their Parquet files relative to the data root: open the file with the data root as
    the working directory, or run `SET file_search_path = '<data root>'` first.
    """
    import duckdb

    target = catalog_path(data_root)
    tmp = data_root / f".catalog.duckdb.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        create_views(con, data_root / "catalog", relative=True)
    finally:
        con.close()
    os.replace(tmp, target)
    return target


# DuckDB installs and loads an extension it knows of (httpfs, ...) when a query names what it serves,
# over the network: never here.
NO_EXTENSION_INSTALLS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def confine_reads(con: Any, catalog_root: Path) -> None:
    """After the views exist: the connection reads only the catalog's folder (no other file, no URL), and
    its configuration is locked, so a query cannot widen it again."""
    folder = str(catalog_root.resolve()).replace("'", "''")
    con.execute(f"SET allowed_directories = ['{folder}/']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def query(data_root: Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run read-only SQL over the catalog views: SELECT statements only."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise CatalogError(f"the query does not parse: {exc}") from None
    if not statements:
        raise CatalogError("the query is empty")
    for st in statements:
        if st.type != duckdb.StatementType.SELECT:
            raise CatalogError(f"only SELECT queries are allowed here (got {st.type.name}); "
                               f"the catalog is read-only")
    con = duckdb.connect(":memory:", config=NO_EXTENSION_INSTALLS)
    try:
        create_views(con, data_root / "catalog")
        confine_reads(con, data_root / "catalog")
        try:
            cur = None
            for st in statements:
                cur = con.execute(st.query)
            assert cur is not None
            columns = [d[0] for d in cur.description or []]
            return columns, cur.fetchall()
        except duckdb.Error as exc:
            raise CatalogError(f"{exc}; tables: {', '.join(TABLES)} (see docs/catalogs.md)") from None
    finally:
        con.close()

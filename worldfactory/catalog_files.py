"""The catalog's Parquet row formats (one schema per table) and the writer of one policy's or one run's file in
a world's partition: below the catalog layer, so the build's rows (catalog.py) and an evaluation run's rows
(evals/runs.py) are written to one format without the runs importing the catalog above them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from worldfactory.spec import Difficulty

ROLLOUTS = pa.schema([
    ("task_id", pa.string()), ("family", pa.string()), ("policy", pa.string()), ("rollout", pa.int32()),
    ("seed", pa.int64()), ("reward", pa.float64()), ("steps", pa.int32()), ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()), ("cost_usd", pa.float64()), ("seconds", pa.float64()),
])
TRACES = pa.schema([
    ("task_id", pa.string()), ("policy", pa.string()), ("rollout", pa.int32()), ("step", pa.int32()),
    ("tool", pa.string()), ("args_json", pa.string()), ("result_json", pa.string()), ("error", pa.bool_()),
    ("error_text", pa.string()), ("result_sha256", pa.string()), ("latency_us", pa.float64()),
])


def _of_run(schema: pa.Schema, *left_out: str) -> pa.Schema:
    """An evaluation run's rows: the build's, keyed by the run (its id first), less what a run does not keep."""
    return pa.schema([("run_id", pa.string()), *(f for f in schema if f.name not in left_out)])


SCHEMAS: dict[str, pa.Schema] = {
    "worlds": pa.schema([
        ("seed_type", pa.string()), ("domain", pa.string()), ("company_type", pa.string()),
        ("variant", pa.int32()), ("company_name", pa.string()), ("generation_seed", pa.uint64()),
        ("generator_version", pa.string()), ("clock", pa.string()), ("tables", pa.int32()), ("rows", pa.int64()),
        ("tools", pa.int32()), ("tasks", pa.int32()), ("oracle_pass", pa.int32()), ("null_pass", pa.int32()),
        ("path", pa.string()), ("world_json_sha256", pa.string()), ("coverage", pa.float64()),
        ("schema_sha256", pa.string()), ("tool_set_sha256", pa.string()),
        ("alternatives", pa.int32()), ("alternatives_passed", pa.int32()),  # completeness: valid solutions passed
        # the realism audit (worldfactory/audit.py) over the seed and over every oracle plan's end state
        ("audit_seed_violations", pa.int32()), ("audit_oracle_violations", pa.int32()),
    ]),
    "tasks": pa.schema([
        ("task_id", pa.string()), ("family", pa.string()), ("instruction", pa.string()),
        ("oracle_steps", pa.int32()), ("answer_type", pa.string()), ("target", pa.string()),
        *((f"difficulty_{name}", pa.int32()) for name in Difficulty.model_fields),  # spec.Difficulty, one each
    ]),
    "costs": pa.schema([
        ("stage", pa.string()), ("cpu_seconds", pa.float64()), ("wall_seconds", pa.float64()),
        ("llm_prompt_tokens", pa.int64()), ("llm_completion_tokens", pa.int64()), ("cost_usd", pa.float64()),
        ("corrections", pa.int32()),
    ]),
    "rollouts": ROLLOUTS,
    "traces": TRACES,
    # evaluation runs (worldfactory.evals.runs): one file per run in each world's partition
    "runs": pa.schema([
        ("run_id", pa.string()), ("name", pa.string()), ("policy", pa.string()), ("model", pa.string()),
        ("base_url", pa.string()), ("k", pa.int32()), ("seed", pa.int64()), ("tasks", pa.int32()),
        ("episodes", pa.int32()), ("passes", pa.int32()), ("code_version", pa.string()),
    ]),
    "run_rollouts": _of_run(ROLLOUTS, "seconds"),
    "run_traces": _of_run(TRACES, "policy", "latency_us"),
    # the pass band of each policy: the build's reference policy (run_id '') and every evaluation run
    "bands": pa.schema([
        ("task_id", pa.string()), ("family", pa.string()), ("policy", pa.string()), ("run_id", pa.string()),
        ("pass_rate", pa.float64()), ("passes", pa.int32()), ("rollouts", pa.int32()),
    ]),
    # a world whose last build failed: one row while it stays so (cleared when a build publishes it); a
    # world published before keeps its bundle, and `kept_world_json_sha256` names the bundle that stays
    "failed_builds": pa.schema([
        ("stage", pa.string()), ("check_name", pa.string()), ("reason", pa.string()), ("inputs", pa.string()),
        ("kept_world_json_sha256", pa.string()),
    ]),
}
TABLES = tuple(SCHEMAS)


def write_policy_rows(catalog_root: Path, table: str, world_id: str, policy: str, rows: list[dict[str, Any]]) -> Path:
    """Replace one policy's file in one world's partition of `rollouts` or `traces`."""
    folder = catalog_root / table / f"world_id={world_id}"
    folder.mkdir(parents=True, exist_ok=True)
    name = "part-" + "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in policy) + ".parquet"
    tmp = folder / f".{name}.tmp-{os.getpid()}"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), tmp, compression="zstd")
    os.replace(tmp, folder / name)
    return folder / name

"""`worldfactory export`: a world's curated tasks as a Hugging Face `datasets` dataset.

A trainer wants the tasks as rows it can shuffle, split and feed to a trainer's prompt column,
without opening a world. The rows come from the published bundles alone (tasks.jsonl,
curated_tasks.jsonl, verifiers.json, tools.json, world.json), so they agree with the catalog,
which is written from the same files. One row per (world, task), sorted by world then task:

    world_id, task_id, family, instruction, horizon (the oracle's tool calls), answer_type,
    pass_rate (null with --all-tasks for a task outside the pass band), domain, company_type,
    prompt (chat messages: the instruction as the user's turn),
    tools (the world's tool schemas as JSON, in the chat-completions `tools=` format)

`datasets` is imported only to write and read (the `trainers` extra).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from worldfactory.env import openai_tools
from worldfactory.runtime.world import WorldError

FORMATS = ("disk", "parquet")
PARQUET_NAME = "tasks.parquet"


class ExportError(WorldError):
    """A bundle cannot be exported; the message names the file and the field."""


class TaskRow(BaseModel):
    world_id: str
    task_id: str
    family: str
    instruction: str
    horizon: int
    answer_type: str | None
    pass_rate: float | None
    domain: str
    company_type: str
    prompt: list[dict[str, str]]
    tools: str


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(f"{path}: missing; is this a built world? (`worldfactory build`)") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: not JSON ({e})") from None


def _read_jsonl(path: Path, required: tuple[str, ...]) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ExportError(f"{path}: missing; is this a built world? (`worldfactory build`)") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ExportError(f"{path}:{n}: not JSON ({e})") from None
        for field in required:
            if field not in row:
                raise ExportError(f"{path}:{n}: field '{field}' is missing")
        rows.append(row)
    return rows


def bundle_rows(bundle: Path, all_tasks: bool = False,
                bands: dict[str, dict[str, float]] | None = None) -> list[TaskRow]:
    """One world's rows: its curated tasks (or, with all_tasks, every task it serves). `bands`: world id ->
    another policy's pass band (task id -> pass rate, an evaluation run's) in place of the build's."""
    manifest = _read_json(bundle / "world.json")
    band = None if bands is None else bands.get(manifest["world_id"], {})
    served = _read_json(bundle / "verifiers.json").get("tasks", {})
    tools = json.dumps(openai_tools(_read_json(bundle / "tools.json")), sort_keys=True)
    tasks = {t["task_id"]: t for t in _read_jsonl(bundle / "tasks.jsonl", ("task_id", "family", "instruction",
                                                                          "oracle"))}
    curated = dict(band) if band is not None else {}
    build_band = _read_jsonl(bundle / "curated_tasks.jsonl", ("task_id", "pass_rate")) if band is None else []
    for n, row in enumerate(build_band, 1):
        if row["task_id"] not in tasks or row["task_id"] not in served:
            raise ExportError(f"{bundle / 'curated_tasks.jsonl'}:{n}: field 'task_id': '{row['task_id']}' is not a "
                              f"task this world serves (tasks.jsonl, verifiers.json)")
        curated[row["task_id"]] = float(row["pass_rate"])
    chosen = sorted(t for t in tasks if t in served) if all_tasks else sorted(curated)
    return [TaskRow(world_id=manifest["world_id"], task_id=tid, family=tasks[tid]["family"],
                    instruction=tasks[tid]["instruction"], horizon=len(tasks[tid]["oracle"]),
                    answer_type=tasks[tid].get("answer_type"), pass_rate=curated.get(tid),
                    domain=manifest["domain"], company_type=manifest["company_type"],
                    prompt=[{"role": "user", "content": tasks[tid]["instruction"]}], tools=tools)
            for tid in chosen]


def export_rows(bundles: list[Path], all_tasks: bool = False,
                bands: dict[str, dict[str, float]] | None = None) -> list[dict[str, Any]]:
    """The rows of every bundle, sorted by (world_id, task_id); `bands`: world id -> another policy's band."""
    rows = [r.model_dump() for b in bundles for r in bundle_rows(b, all_tasks, bands)]
    return sorted(rows, key=lambda r: (r["world_id"], r["task_id"]))


def to_dataset(rows: list[dict[str, Any]]) -> Any:
    """A `datasets.Dataset` with fixed column types (an empty export still has its columns)."""
    import datasets

    features = datasets.Features({
        "world_id": datasets.Value("string"), "task_id": datasets.Value("string"),
        "family": datasets.Value("string"), "instruction": datasets.Value("string"),
        "horizon": datasets.Value("int32"), "answer_type": datasets.Value("string"),
        "pass_rate": datasets.Value("float64"), "domain": datasets.Value("string"),
        "company_type": datasets.Value("string"),
        "prompt": datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")}),
        "tools": datasets.Value("string"),
    })
    columns = {name: [r[name] for r in rows] for name in features}
    return datasets.Dataset.from_dict(columns, features=features)


def write_dataset(rows: list[dict[str, Any]], out: Path, fmt: Literal["disk", "parquet"] = "disk") -> Path:
    """Write the rows: `disk` is `save_to_disk(out)` (read back with `datasets.load_from_disk`),
    `parquet` is one file out/tasks.parquet (`datasets.load_dataset("parquet", data_files=...)`)."""
    if fmt not in FORMATS:
        raise ExportError(f"format '{fmt}': use one of {', '.join(FORMATS)}")
    ds = to_dataset(rows)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        target = out / PARQUET_NAME
        ds.to_parquet(str(target))
        return target
    ds.save_to_disk(str(out))
    return out

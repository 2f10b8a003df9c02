"""`worldfactory export`: built worlds' curated tasks as a Hugging Face `datasets` dataset with a card.

A trainer wants the tasks as rows it can shuffle and feed to a trainer's prompt column, held-out
splits that test generalization to unseen worlds (or unseen domains), and a card that says what the
rows are. The rows come from the published bundles alone (tasks.jsonl, curated_tasks.jsonl,
verifiers.json, tools.json, world.json), so they agree with the catalog, which is written from the
same files. Two tables:

    tasks (splits train / validation / test, each world or domain in one split only), one row per
    (world, task), sorted by world then task: world_id, task_id, family, instruction, horizon (the
    oracle's tool calls), answer_type, pass_rate (null with --all-tasks for a task outside the pass
    band), domain, company_type, prompt (chat messages: the instruction as the user's turn)
    tools, one row per world: world_id, domain, tools (its tool schemas as JSON, in the
    chat-completions `tools=` format), pass_band_policy, pass_band_k

A world's tools are tens of kilobytes: once per world, joined on world_id, not on every task row.
`datasets` is imported only to write and read (the `trainers` extra).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from worldfactory.env import openai_tools
from worldfactory.runtime.world import WorldError

FORMATS = ("disk", "parquet")
SPLITS = ("train", "validation", "test")
SPLIT_BY = ("world", "domain")
HELD_OUT = 0.1  # the share of worlds (or domains) in each of validation and test
CARD = "README.md"


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


class WorldRow(BaseModel):
    """One world's row in the `tools` table, and what the card says of how its pass band was cut."""

    world_id: str
    domain: str
    company_type: str
    tools: str
    pass_band_policy: str
    pass_band_k: int


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
                    prompt=[{"role": "user", "content": tasks[tid]["instruction"]}])
            for tid in chosen]


def world_row(bundle: Path) -> WorldRow:
    """A world's tools (chat-completions form, as JSON) and its pass band's policy."""
    manifest = _read_json(bundle / "world.json")
    band = manifest.get("pass_band")
    if not isinstance(band, dict) or "policy" not in band or "k" not in band:
        raise ExportError(f"{bundle / 'world.json'}: field 'pass_band' (policy, k) is missing; rebuild the world "
                          f"with `worldfactory build`")
    return WorldRow(world_id=manifest["world_id"], domain=manifest["domain"], company_type=manifest["company_type"],
                    tools=json.dumps(openai_tools(_read_json(bundle / "tools.json")), sort_keys=True),
                    pass_band_policy=str(band["policy"]), pass_band_k=int(band["k"]))


def world_rows(bundles: list[Path]) -> list[dict[str, Any]]:
    """Every bundle's WorldRow, sorted by world_id."""
    return sorted((world_row(b).model_dump() for b in bundles), key=lambda r: r["world_id"])


def split_groups(groups: set[str]) -> dict[str, str]:
    """Each world (or domain) to one split, by the SHA-256 of its name: the same whatever else is exported
    beside it in order, and none in two splits. With three or more, validation and test hold at least one
    each (HELD_OUT of them when there are more); with two, test holds one."""
    ordered = sorted(groups, key=lambda g: (hashlib.sha256(g.encode()).hexdigest(), g))
    n = len(ordered)
    held = max(1, round(n * HELD_OUT)) if n >= 3 else 0
    n_test = held if n >= 3 else (1 if n == 2 else 0)
    out = {g: "test" for g in ordered[:n_test]}
    out.update({g: "validation" for g in ordered[n_test:n_test + held]})
    out.update({g: "train" for g in ordered[n_test + held:]})
    return out


def split_rows(rows: list[dict[str, Any]], by: str = "world") -> dict[str, list[dict[str, Any]]]:
    """The task rows in train / validation / test, held out by world_id or by domain (empty ones left out)."""
    if by not in SPLIT_BY:
        raise ExportError(f"split by '{by}': use one of {', '.join(SPLIT_BY)}")
    key = "world_id" if by == "world" else "domain"
    where = split_groups({r[key] for r in rows})
    parts = {name: [r for r in rows if where[r[key]] == name] for name in SPLITS}
    # a split with no rows is left out (one or two worlds): `datasets` refuses to load an empty data file
    return {name: part for name, part in parts.items() if part or name == "train"}


def export_rows(bundles: list[Path], all_tasks: bool = False,
                bands: dict[str, dict[str, float]] | None = None) -> list[dict[str, Any]]:
    """The rows of every bundle, sorted by (world_id, task_id); `bands`: world id -> another policy's band."""
    rows = [r.model_dump() for b in bundles for r in bundle_rows(b, all_tasks, bands)]
    return sorted(rows, key=lambda r: (r["world_id"], r["task_id"]))


TASK_FEATURES = {"world_id": "string", "task_id": "string", "family": "string", "instruction": "string",
                 "horizon": "int32", "answer_type": "string", "pass_rate": "float64", "domain": "string",
                 "company_type": "string"}
WORLD_FEATURES = {"world_id": "string", "domain": "string", "company_type": "string", "tools": "string",
                  "pass_band_policy": "string", "pass_band_k": "int32"}


def to_dataset(rows: list[dict[str, Any]]) -> Any:
    """A `datasets.Dataset` of task rows with fixed column types (an empty export still has its columns)."""
    import datasets

    features = datasets.Features({
        **{name: datasets.Value(kind) for name, kind in TASK_FEATURES.items()},
        "prompt": datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")}),
    })
    return datasets.Dataset.from_dict({name: [r[name] for r in rows] for name in features}, features=features)


def tools_dataset(worlds: list[dict[str, Any]]) -> Any:
    """A `datasets.Dataset` of the `tools` table: one row per world."""
    import datasets

    features = datasets.Features({name: datasets.Value(kind) for name, kind in WORLD_FEATURES.items()})
    return datasets.Dataset.from_dict({name: [w[name] for w in worlds] for name in features}, features=features)


def write_dataset(rows: list[dict[str, Any]], out: Path, fmt: Literal["disk", "parquet"] = "disk",
                  worlds: list[dict[str, Any]] | None = None, split_by: str = "world",
                  license: str = "other", band_run: str | None = None) -> Path:
    """Write the dataset folder: the card (out/README.md), the task splits and the tools table.

    `disk`: out/tasks (`datasets.load_from_disk`: a DatasetDict of the splits) and out/tools.
    `parquet`: out/tasks/<split>.parquet and out/tools/tools.parquet, the layout the card's `configs`
    name, so `datasets.load_dataset(str(out), "tasks")` (or "tools") reads the folder.
    """
    import datasets

    if fmt not in FORMATS:
        raise ExportError(f"format '{fmt}': use one of {', '.join(FORMATS)}")
    worlds = worlds or []
    splits = split_rows(rows, split_by)
    tasks = datasets.DatasetDict({name: to_dataset(part) for name, part in splits.items()})
    tools = tools_dataset(worlds)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        (out / "tasks").mkdir(exist_ok=True)
        (out / "tools").mkdir(exist_ok=True)
        for name, ds in tasks.items():
            ds.to_parquet(str(out / "tasks" / f"{name}.parquet"))
        tools.to_parquet(str(out / "tools" / "tools.parquet"))
    else:
        tasks.save_to_disk(str(out / "tasks"))
        tools.save_to_disk(str(out / "tools"))
    (out / CARD).write_text(dataset_card(splits, worlds, split_by, license, fmt, band_run))
    return out


def dataset_card(splits: dict[str, list[dict[str, Any]]], worlds: list[dict[str, Any]], split_by: str,
                 license: str, fmt: str, band_run: str | None = None) -> str:
    """The dataset card: YAML metadata the Hub reads (license, configs), then what the rows are and how
    they were made. Only facts of the export: no dates, so the same worlds give the same card."""
    policies = sorted({(w["pass_band_policy"], w["pass_band_k"]) for w in worlds})
    band = "; ".join(f"policy `{p}`, {k} rollouts per task" for p, k in policies) or "no worlds"
    if band_run is not None:  # `export --run`: an evaluation run's band, not the builds'
        band = (f"the pass rates of evaluation run `{band_run}` (`worldfactory eval list`), in place of the "
                f"builds' ({band})")
    n_tasks = sum(len(v) for v in splits.values())
    if fmt == "parquet":
        configs = ["configs:", "- config_name: tasks", "  default: true", "  data_files:",
                   *[f"  - split: {name}\n    path: tasks/{name}.parquet" for name in splits],
                   "- config_name: tools", "  data_files:", "  - split: train\n    path: tools/tools.parquet"]
        load = ('datasets.load_dataset("OUT", "tasks")   # train / validation / test\n'
                'datasets.load_dataset("OUT", "tools")["train"]')
    else:
        configs = []
        load = ('datasets.load_from_disk("OUT/tasks")   # train / validation / test\n'
                'datasets.load_from_disk("OUT/tools")')
    split_lines = [f"| {name} | {len(part)} | {len({r['world_id'] for r in part})} | "
                   f"{', '.join(sorted({r['domain'] for r in part})) or '-'} |" for name, part in splits.items()]
    lines = [
        "---", f"license: {license}", "language:", "- en", "pretty_name: WorldFactory tasks",
        "task_categories:", "- reinforcement-learning", "- text-generation",
        "tags:", "- tool-use", "- agents", "- mcp", "- synthetic", *configs, "---", "",
        "# WorldFactory tasks", "",
        f"{n_tasks} tasks from {len(worlds)} synthetic worlds built by WorldFactory. A world is a company's "
        "SQLite database (made-up, seeded data: no real people or records), the MCP tools an agent uses to "
        "read and change it, tasks written as a user's request, and a verifier per task that compares the "
        "database after the agent's tool calls with the state the task's oracle plan produces.",
        "",
        "## How it was made", "",
        "Each world was generated from a domain pack and a seed by `worldfactory build`: the database is "
        "seeded, the tools generated and tested, the tasks' oracle plans run and verified, and every task "
        "rolled out with a fixed policy. A task is in the **pass band** (curated) when that policy passed "
        f"it in some rollouts but not all: 0 < pass_rate < 1. Pass band here: {band}. `pass_rate` is that "
        "policy's rate, not a model's; with `--all-tasks` tasks outside the band have a null pass_rate.",
        "",
        "## Splits", "",
        f"Held out by **{split_by}**: each {split_by} is in one split only, chosen by the SHA-256 of its "
        "name (validation and test hold about 10% each, and at least one each when there are three or "
        "more), so validation and test measure generalization to "
        f"{'worlds' if split_by == 'world' else 'domains'} not seen in training.",
        "", "| split | tasks | worlds | domains |", "|---|---|---|---|", *split_lines, "",
        "## Fields", "",
        "`tasks` (one row per world and task):", "",
        "| field | meaning |", "|---|---|",
        "| world_id | the world, `<domain>.<variant>--v<NNN>` |", "| task_id | the task within its world |",
        "| family | the task's kind (lookup, update, conditional, ...) |",
        "| instruction | the user's request |", "| horizon | tool calls in the oracle plan |",
        "| answer_type | what the final answer is, if the task asks for one |",
        "| pass_rate | the pass-band policy's rate (see above) |", "| domain, company_type | the world's business |",
        "| prompt | chat messages: the instruction as the user's turn |", "",
        "`tools` (one row per world; join on world_id):", "",
        "| field | meaning |", "|---|---|",
        "| tools | the world's tool schemas, JSON, in the chat-completions `tools=` format |",
        "| pass_band_policy, pass_band_k | the policy and rollouts per task that cut the pass band |", "",
        "## Use", "", "OUT is this folder.", "", "```python", "import datasets", load, "```", "",
        "Rewards come from the world itself: serve it (`worldfactory serve WORLD`) and run the task's "
        "verifier after an episode; the rows hold the tasks, not the answers.", "",
        "## License", "",
        f"`{license}`" + (" (not set: pass `--license` to `worldfactory export`)" if license == "other" else "")
        + ". The data are synthetic, generated from WorldFactory's templates.", "",
    ]
    return "\n".join(lines)

"""build_world: every stage in order for one world ID, each proved before the next runs.

The Dagster assets call the same stage functions one by one; this module is the engine's own
sequential path (used by tests, benches and the CLI's offline mode).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import worldfactory
from worldfactory.build.bundle import publish, world_manifest, world_readme, write_json
from worldfactory.build.data import build_seed_db, check_seed
from worldfactory.build.probes import probes_for
from worldfactory.build.schema import build_spec, check_schema, schema_sql
from worldfactory.build.tasks import generate_tasks
from worldfactory.build.tools import tool_specs, tools_json, tools_source
from worldfactory.build.verifiers import build_verifiers, check_verifiers, verifiers_json
from worldfactory.runtime.world import World
from worldfactory.sandbox import check_tools_in_sandbox
from worldfactory.seeds import expand_seed
from worldfactory.templates import TemplateSet, load_templates

Progress = Callable[[str], None]


class BuildResult(BaseModel):
    world_id: str
    path: str
    skipped: bool
    counts: dict[str, int]
    verification: dict[str, Any]
    seconds: float


def engine_fingerprint() -> str:
    """Hash of the engine's own source: a world is up to date only if this and the templates match."""
    root = Path(worldfactory.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def inputs_fingerprint(templates: TemplateSet) -> str:
    return hashlib.sha256(f"{engine_fingerprint()}|{templates.fingerprint}".encode()).hexdigest()


def is_up_to_date(dest: Path, inputs: str) -> bool:
    manifest = dest / "world.json"
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text()).get("inputs_fingerprint") == inputs
    except json.JSONDecodeError:
        return False


def build_world(world_id: str, out_root: Path | str = "data/worlds", templates: TemplateSet | None = None,
                force: bool = False, progress: Progress | None = None) -> BuildResult:
    """Build, prove and publish one world bundle under out_root/<world_id>."""
    started = time.perf_counter()
    ts = templates or load_templates()
    out = Path(out_root)
    dest = out / world_id
    inputs = inputs_fingerprint(ts)
    if not force and is_up_to_date(dest, inputs):
        manifest = json.loads((dest / "world.json").read_text())
        return BuildResult(world_id=world_id, path=str(dest), skipped=True, counts=manifest["counts"],
                           verification=manifest["verification"], seconds=time.perf_counter() - started)
    say = progress or (lambda _stage: None)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".staging-{world_id}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    files: dict[str, bytes] = {}

    def put(name: str, data: bytes) -> None:
        (staging / name).write_bytes(data)
        files[name] = data

    try:
        say("world_brief")
        brief = expand_seed(world_id, ts)
        put("brief.json", (brief.model_dump_json(indent=1) + "\n").encode())

        say("world_schema")
        spec = build_spec(brief, ts)
        ddl = schema_sql(spec)
        check_schema(spec, ddl)
        put("spec.json", (spec.model_dump_json(indent=1, by_alias=True) + "\n").encode())
        put("schema.sql", ddl.encode())

        say("seed_database")
        image = build_seed_db(spec, ts.vocabulary)
        seed_report = check_seed(spec, image)
        put("seed.db", image)

        say("world_tools")
        tools = tool_specs(spec)
        probes = probes_for(spec, tools, image)
        for t in tools:
            t.examples = probes[t.name]
        put("tools.py", tools_source(spec, tools).encode())
        put("tools.json", tools_json(tools).encode())
        check_tools_in_sandbox(staging)

        say("world_tasks")
        tasks = generate_tasks(spec, {t.name for t in tools}, image)
        put("tasks.jsonl", "".join(t.model_dump_json() + "\n" for t in tasks).encode())

        say("world_verifiers")
        verifiers = build_verifiers(World(files), tasks)
        put("verifiers.json", verifiers_json(verifiers).encode())
        verification = check_verifiers(World(files))

        say("world_bundle")
        manifest = world_manifest(spec, files, tools, tasks, seed_report["rows"], verification, inputs)
        readme = world_readme(spec, manifest, seed_report["row_counts"], tools, tasks)
        put("README.md", readme.encode())
        manifest["files"]["README.md"] = hashlib.sha256(readme.encode()).hexdigest()
        write_json(staging / "world.json", manifest)
        publish(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BuildResult(world_id=world_id, path=str(dest), skipped=False, counts=manifest["counts"],
                       verification=verification, seconds=time.perf_counter() - started)

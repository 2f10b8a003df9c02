"""World.open(path): load a bundle once; world.episode(task_id) gives a fresh episode.

A World is built from the bundle's files (or the same files in memory while a build runs), so
the build stages and the served world share one runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import types
from collections.abc import Callable
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson
from jsonschema import Draft202012Validator

from worldfactory.data_root import WorldError
from worldfactory.run_size import WORLDS_PER_RUN
from worldfactory.runtime.answers import RuleRef
from worldfactory.runtime.connections import ConnectionPool
from worldfactory.runtime.diff import ChangeDiffer, TableNorm, changelog_ddl, inserted_bags
from worldfactory.spec import Task, WorldSpec

REQUIRED_FILES = ("brief.json", "spec.json", "schema.sql", "seed.db", "tools.py", "tools.json")  # to load a world
ENV_NO_VERIFY = "WORLDFACTORY_NO_VERIFY"  # development only: open bundles whose files differ from world.json


# Worlds a process keeps parsed and loaded. A Dagster run over a range of worlds goes stage by stage:
# every world of the run passes through one stage before the first comes back for the next, so the
# caches must hold a whole run, or every load in the run misses (a load takes about 24 ms cold and 6 ms
# warm, and a build loads about seven times). About 8 MB a world in the confined worker.
LOAD_CACHE = WORLDS_PER_RUN + 4


@lru_cache(maxsize=LOAD_CACHE)
def _compiled(source: str, filename: str) -> types.CodeType:
    """tools.py compiled once per process: the same text gives the same code object; each load still runs it."""
    return compile(source, filename, "exec")


@lru_cache(maxsize=LOAD_CACHE)
def parsed_spec(data: bytes) -> WorldSpec:
    """spec.json parsed once per text: every World loaded from it shares the model (never mutated)."""
    return WorldSpec.model_validate_json(data)


@lru_cache(maxsize=LOAD_CACHE)
def parsed_tasks(data: bytes) -> tuple[Task, ...]:
    """tasks.jsonl parsed once per text (shared, never mutated): a World takes its own dict of them."""
    return tuple(Task.model_validate_json(line) for line in data.decode().splitlines() if line.strip())


@lru_cache(maxsize=LOAD_CACHE)
def _fast_validators(manifest: bytes) -> dict[str, jsonschema_rs.Validator]:
    """The compiled argument check of every tool of a tools.json, made once per text (a World copies the dict)."""
    return {t["name"]: jsonschema_rs.validator_for(t["input_schema"], validate_formats=True)
            for t in load_json(manifest)}


def load_json(data: bytes) -> Any:
    """json.loads, in a third of the time: orjson gives the same values for every text it accepts,
    and json reads what it refuses (NaN, lone surrogates) as before."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def load_tools_module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = f"<{name}/tools.py>"
    exec(_compiled(source, module.__file__), module.__dict__)
    return module


@lru_cache(maxsize=LOAD_CACHE)
def _statically_checked(source: str) -> None:
    """The allowlist check, once per tools.py text (it raises on a refusal, and a refusal is not cached)."""
    from worldfactory.sandbox import static_check

    static_check(source)


@lru_cache(maxsize=LOAD_CACHE)
def _runtime_image(seed_image: bytes, tables: tuple[str, ...]) -> bytes:
    return runtime_image(seed_image, list(tables))


def runtime_image(seed_image: bytes, tables: list[str]) -> bytes:
    """The seed plus a change log that triggers keep: episodes start from this image.

    Every insert, update and delete on a world table records the row's key, so a verifier diffs
    only the rows that changed instead of whole tables. The world's own tables and rows are the
    seed's, unchanged; the log starts empty.
    """
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(seed_image)
        conn.executescript(changelog_ddl(tables))
        return conn.serialize()
    finally:
        conn.close()


def normalization(spec: WorldSpec, seed_image: bytes) -> dict[str, TableNorm]:
    """What a verifier may normalise, per table: surrogate references and free text."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(seed_image)
        out = {}
        for t in spec.tables:
            max_id = conn.execute(f"SELECT coalesce(max(id), 0) FROM {t.name}").fetchone()[0]
            out[t.name] = TableNorm(
                columns=[c.name for c in t.columns],
                refs={c.name: c.ref for c in t.columns if c.ref},
                poly={c.name: c.poly_ref for c in t.columns if c.poly_ref},
                free_text=[c.name for c in t.columns if c.free_text],
                seed_max_id=max_id,
            )
        return out
    finally:
        conn.close()


def verification_skipped() -> bool:
    return os.environ.get(ENV_NO_VERIFY, "").strip().lower() in ("1", "true", "yes", "on")


def read_bundle(root: Path, verify: bool = True) -> dict[str, bytes]:
    """A bundle's files, each checked against the sha256 world.json lists for it.

    A file that differs, a listed file that is missing and a file world.json does not list are
    all refused, by name: a bundle is served exactly as it was built and proven, or not at all.
    """
    if not (root / "world.json").is_file():
        raise WorldError(f"{root}: no world.json here; build the world first (`worldfactory build WORLD_ID`)")
    names = sorted(p.name for p in root.iterdir() if p.is_file())
    if not verify or verification_skipped():
        return {name: (root / name).read_bytes() for name in names}
    manifest = (root / "world.json").read_bytes()
    try:
        listed = json.loads(manifest).get("files", {})
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        raise WorldError(f"{root / 'world.json'}: not a readable manifest; rebuild the world") from None
    if not isinstance(listed, dict) or not listed:
        raise WorldError(f"{root / 'world.json'}: lists no file hashes; rebuild the world")
    for name in sorted(set(listed) | set(names) - {"world.json"}):  # the list first: no file is read unlisted
        if name not in names:
            raise WorldError(f"{root / name}: listed in world.json but missing; rebuild the world")
        if name not in listed:
            raise WorldError(f"{root / name}: not listed in world.json (an unverified file); remove it or rebuild")
    files = {"world.json": manifest}
    for name in sorted(listed):
        files[name] = (root / name).read_bytes()
        if hashlib.sha256(files[name]).hexdigest() != listed[name]:
            raise WorldError(f"{root / name}: its sha256 differs from world.json (the bundle was changed after it "
                             f"was built); rebuild the world, or pass --no-verify (development only)")
    return dict(sorted(files.items()))


class World:
    """A loaded world: seed image, tool functions and schemas, tasks and verifiers."""

    def __init__(self, files: dict[str, bytes], path: Path | None = None, *, static: bool = True,
                 code: bool = True) -> None:
        """static=False skips the allowlist check of tools.py (tests of the deeper layers only);
        code=False loads the data alone, never executing tools.py (the stand-in of a confined world)."""
        missing = [f for f in REQUIRED_FILES if f not in files]
        if missing:
            where = str(path) if path else "world"
            raise WorldError(f"{where}: not a complete world bundle; missing {', '.join(missing)}")
        self.path = path
        self.files = files
        self.spec = parsed_spec(files["spec.json"])
        self.brief = self.spec.brief
        self.world_id = self.brief.world_id
        self.clock = self.brief.clock
        self.seed_image = files["seed.db"]
        self.tool_manifest: list[dict[str, Any]] = load_json(files["tools.json"])
        self.tools_by_name = {t["name"]: t for t in self.tool_manifest}
        self.functions: dict[str, Callable[..., Any]] = {}
        self.module: types.ModuleType | None = None
        if code:
            self._load_code(files["tools.py"], static)
        self._validators: dict[str, Draft202012Validator] = {}  # made on a tool's first invalid call
        # The compiled validator answers valid-or-not in microseconds; the Python one words the errors.
        self.fast_validators = dict(_fast_validators(files["tools.json"]))
        self.norm = normalization(self.spec, self.seed_image)
        self.start_image = _runtime_image(self.seed_image, tuple(t.name for t in self.spec.tables))
        self._seed_rows: dict[str, dict[int, tuple[Any, ...]]] = {}
        self._lock = threading.Lock()
        self.differ = ChangeDiffer(self.norm, self.seed_rows)
        self.connections = ConnectionPool(self.start_image)
        self._gold_bags: dict[str, dict[str, Any]] = {}
        self.tasks: dict[str, Task] = {}
        if "tasks.jsonl" in files:
            self.tasks = {t.task_id: t for t in parsed_tasks(files["tasks.jsonl"])}
        self.verifiers: dict[str, Any] = load_json(files["verifiers.json"]) if "verifiers.json" in files else {}
        for task_id in self.verifiers.get("dropped", {}):  # its grader failed the validity check: not served
            self.tasks.pop(task_id, None)
        self.manifest: dict[str, Any] = load_json(files["world.json"]) if "world.json" in files else {}

    def _load_code(self, source: bytes, static: bool) -> None:
        if static:
            _statically_checked(source.decode())
        module_name = "wf_tools_" + hashlib.sha256(source).hexdigest()[:12]
        self.module = load_tools_module(source.decode(), module_name)
        for name in self.tools_by_name:
            fn = getattr(self.module, name, None)
            if fn is None or not hasattr(fn, "__wf_tool__"):
                raise WorldError(f"tools.py has no tool function '{name}' listed in tools.json")
            self.functions[name] = fn

    @classmethod
    def open(cls, path: str | Path, verify: bool = True) -> World:
        """Load a bundle (a folder, or a world ID under the data root as the CLI finds it: data_root.py);
        every file must match its hash in world.json (verify=False skips that, for development)."""
        from worldfactory.data_root import resolve_world

        root = resolve_world(path)
        return cls(read_bundle(root, verify), root)

    def seed_rows(self, table: str) -> dict[int, tuple[Any, ...]]:
        """The seed's rows of one table by id (id first, then the columns in spec order); read once."""
        rows = self._seed_rows.get(table)
        if rows is None:
            with self._lock:
                rows = self._seed_rows.get(table)
                if rows is None:
                    cols = ", ".join(["id", *self.norm[table].columns])
                    conn = sqlite3.connect(":memory:")
                    try:
                        conn.deserialize(self.seed_image)
                        rows = {r[0]: r for r in conn.execute(f"SELECT {cols} FROM {table}")}
                    finally:
                        conn.close()
                    self._seed_rows[table] = rows
        return rows

    def argument_error(self, tool: str, args: dict[str, Any]) -> str | None:
        """What is wrong with a call's arguments, or None: the compiled check first, the words only on failure."""
        if self.fast_validators[tool].is_valid(args):
            return None
        from worldfactory.runtime.episode import schema_message

        try:
            errors = sorted(self.validator(tool).iter_errors(args), key=lambda e: list(e.absolute_path))
            if errors:
                return schema_message(tool, errors)
        except RecursionError:  # the wording reprs the value: one nested thousands deep is refused unworded
            return f"invalid arguments for {tool}: a value is nested too deeply"
        return f"invalid arguments for {tool}: a number is out of range (not finite, or too large)"

    def validator(self, tool: str) -> Draft202012Validator:
        """The Python validator of a tool's arguments: it words what is wrong (the compiled one only says whether)."""
        found = self._validators.get(tool)
        if found is None:
            formats = Draft202012Validator.FORMAT_CHECKER  # "format": "date" is a real date, not only a pattern
            found = self._validators[tool] = Draft202012Validator(self.tools_by_name[tool]["input_schema"],
                                                                   format_checker=formats)
        return found

    def use_verifiers(self, verifiers: dict[str, Any]) -> None:
        """Grade with these verifiers (the build's verifier stage, before verifiers.json is written)."""
        self.verifiers = verifiers
        self._gold_bags.clear()

    def gold_bags(self, task_id: str) -> dict[str, Any]:
        """The inserted rows of a task's gold diff as multisets: what verify compares an episode's with."""
        bags = self._gold_bags.get(task_id)
        if bags is None:
            bags = self._gold_bags[task_id] = inserted_bags(self.verifiers["tasks"][task_id]["diff"])
        return bags

    @cached_property
    def rule_refs(self) -> tuple[RuleRef, ...]:
        """The business rules as an answer may name them (id, name, label): a decline answer is resolved to them."""
        norm = self.norm.get("business_rules")
        if norm is None or not {"name", "label"} <= set(norm.columns):
            return tuple(RuleRef(None, r.name, r.label) for r in self.spec.rules)
        at = {c: i + 1 for i, c in enumerate(norm.columns)}  # a seed row is (id, *columns)
        return tuple(RuleRef(row[0], row[at["name"]], row[at["label"]])
                     for _, row in sorted(self.seed_rows("business_rules").items()))

    @cached_property
    def code_hash(self) -> str:
        """Identifies the seed, the tool code and the spec: what a plan's outcome and its end state's audit
        (the spec's date meanings, constraints and invariants) depend on."""
        digest = hashlib.sha256()
        for name in ("seed.db", "tools.py", "tools.json", "spec.json"):
            digest.update(name.encode() + b"\0" + self.files.get(name, b"") + b"\0")
        return digest.hexdigest()

    @cached_property
    def content_hash(self) -> str:
        """Identifies this exact world version (seed, tools, tasks): traces record it."""
        digest = hashlib.sha256()
        for name in ("seed.db", "tools.py", "tools.json", "tasks.jsonl"):
            digest.update(name.encode() + b"\0" + self.files.get(name, b"") + b"\0")
        return digest.hexdigest()

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise WorldError(f"world {self.world_id} has no task '{task_id}' (see `worldfactory show`)") from None

    def episode(self, task_id: str | None = None):  # -> Episode (import cycle kept local)
        from worldfactory.runtime.episode import Episode

        return Episode(self, self.task(task_id) if task_id else None)

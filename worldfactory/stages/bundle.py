"""world_bundle: the manifest, README and web page (index.html), staged, proven, then published by one rename.

make writes the bundle into the work folder's `bundle/`; bundle_complete proves that copy; only then
does publish_bundle move it into data/worlds/<id> and write its catalog rows (run_prove calls it).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from worldfactory import confine
from worldfactory.drafts import RECORD, DraftRecord, add_to_manifest
from worldfactory.generate.bundle import COVERAGE_FLOOR, publish, sha256, world_manifest, world_readme
from worldfactory.generate.page import PAGE, PageError, world_page
from worldfactory.generate.tools import tool_specs
from worldfactory.runtime.world import load_json
from worldfactory.stages.core import BuildContext, Proof, Stage, StageError, registered_stages

STAGED = "bundle"  # the work folder's subfolder holding the bundle between its make and its publish
TRACES = "world_bundle.traces"  # BuildContext.cache key (with the world ID): its traces' lines, read by make


def _require_proofs(ctx: BuildContext) -> dict[str, Proof]:
    """Every upstream stage must be proven, on exactly the files now in the work folder."""
    proofs: dict[str, Proof] = {}
    for stage in registered_stages()[:-1]:
        proof = ctx.work.proof(stage.name)
        if proof is None:
            raise StageError(f"{ctx.world_id}: {stage.name} has not been proven; run its check "
                             f"'{stage.check}' before building the bundle")
        if not proof.passed:
            raise StageError(f"{ctx.world_id}: {stage.name} failed its check '{stage.check}': {proof.reason}")
        if proof.files != ctx.work.hashes(tuple(proof.files)):
            raise StageError(f"{ctx.world_id}: the proof of {stage.name} is stale (its files changed since); "
                             f"run its check '{stage.check}' again")
        proofs[stage.name] = proof
    return proofs


def make_bundle(ctx: BuildContext) -> dict[str, int]:
    from worldfactory.rollouts import traces_file_lines
    stages = registered_stages()
    bundle_files = tuple(name for s in stages for name in s.writes)
    proofs = _require_proofs(ctx)
    spec = ctx.spec(STAGE.name)
    files = ctx.work.files(tuple(name for s in stages[:-1] for name in s.writes))
    tools = tool_specs(spec)
    served = load_json(files["verifiers.json"])
    tasks = [t for t in ctx.tasks(STAGE.name) if t.task_id in served["tasks"]]
    seed = proofs["seed_database"].details
    row_counts = {t.name: int(seed[f"rows.{t.name}"]) for t in spec.tables}
    v = proofs["world_verifiers"].details
    verification = {"tasks": int(v["tasks"]), "oracle_pass": int(v["oracle_pass"]), "null_pass": int(v["null_pass"])}
    manifest = world_manifest(spec, files, tools, tasks, int(seed["rows"]), verification, ctx.inputs,
                              [s.name for s in stages])
    manifest["verifier_validity"] = served.get("validity", {})
    ends = proofs["world_tasks"].details  # the realism audit, blocking in both stages: recorded, always 0 here
    manifest["audit"] = {"seed_violations": int(seed.get("audit_violations", 0)),
                         "seed_checked_rows": int(seed.get("audit_checked_rows", 0)),
                         "oracle_end_violations": int(ends.get("oracle_end_violations", 0)),
                         "oracle_end_checked_rows": int(ends.get("oracle_end_checked_rows", 0))}
    manifest["boundary"] = confine.boundary_name()  # what the generated code ran under; not an input (fingerprints)
    rollouts = json.loads(files["rollouts.json"])
    manifest["counts"]["curated_tasks"] = int(proofs["curated_tasks"].details["kept"])
    manifest["pass_band"] = {"policy": rollouts["policy"], "k": rollouts["k"], "histogram": rollouts["histogram"]}
    for stage_name, cost in sorted(ctx.work.costs().items()):  # tokens and dollars; seconds stay in the catalog
        manifest["costs"][stage_name] = {k: getattr(cost, k) for k in
                                         ("cost_usd", "llm_prompt_tokens", "llm_completion_tokens", "corrections")}
    drafted = ctx.work.path / RECORD
    if drafted.is_file():  # a model drafted the pack: the conversation's tokens, dollars and corrections
        add_to_manifest(DraftRecord.model_validate_json(drafted.read_bytes()), manifest)
    check_coverage(ctx.world_id, manifest)  # before anything is published
    traces = traces_file_lines(files["traces.jsonl.gz"])  # read once: the page and the catalog rows both need it
    readme = world_readme(spec, manifest, row_counts, tools, tasks).encode()
    manifest["files"]["README.md"] = sha256(readme)
    ctx.work.write("README.md", readme)
    try:
        # after README.md: the page lists its hash
        page = world_page(ctx.work.path, manifest, [s.name for s in stages], traces).encode()
    except PageError as exc:
        raise StageError(f"{ctx.world_id}: the world page: {exc}") from None
    manifest["files"][PAGE] = sha256(page)
    ctx.work.write(PAGE, page)
    raw_manifest = (json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n").encode()
    ctx.work.write("world.json", raw_manifest)

    staged = ctx.work.path / STAGED  # the bundle as it will be published: proven here, then moved into place
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    for name in bundle_files:
        shutil.copyfile(ctx.work.path / name, staged / name)
    ctx.cache[f"{TRACES}/{ctx.world_id}"] = traces  # publish_bundle writes the catalog rows from them, in this process
    return {"files": len(bundle_files), "bytes": sum((staged / n).stat().st_size for n in bundle_files)}


def check_coverage(world_id: str, manifest: dict[str, Any]) -> float:
    """The world's write-tool coverage; a StageError naming the unused tools below COVERAGE_FLOOR."""
    coverage = float(manifest.get("coverage", 0.0))
    if coverage < COVERAGE_FLOOR:
        raise StageError(f"{world_id}: only {coverage:.0%} of the write tools appear in a task's oracle (floor "
                         f"{COVERAGE_FLOOR:.0%}); unused: {', '.join(manifest.get('coverage_unused', []))}. "
                         "Give those steps rows in their from-states, a label or a parent a person can name, "
                         "or values a task can say (world_templates/README.md, 'How tools and tasks come from a pack')")
    return coverage


def prove_bundle(ctx: BuildContext) -> dict[str, int | float | str]:
    """The staged bundle opens, every file matches world.json, and its coverage holds: nothing is published yet."""
    staged = ctx.work.path / STAGED
    world = confine.open_world(staged)  # checks every file against world.json
    listed = world.manifest.get("files", {})
    for name, digest in listed.items():
        if sha256((staged / name).read_bytes()) != digest:
            raise StageError(f"{staged / name}: its hash differs from world.json")
    coverage = check_coverage(ctx.world_id, world.manifest)
    return {"files": len(listed), "tasks": len(world.tasks), "content_hash": world.content_hash,
            "coverage": coverage}


def publish_bundle(ctx: BuildContext) -> None:
    """The proven bundle replaces the published one by one rename, then its catalog rows are written.

    Called by run_prove once bundle_complete has passed, never before: a world whose proof fails
    leaves the published bundle (or its absence) and its catalog rows as they were.
    """
    from worldfactory.catalog import clear_failed_build, publish_world_rows
    from worldfactory.rollouts import traces_file_lines

    worlds = ctx.data_root / "worlds"
    worlds.mkdir(parents=True, exist_ok=True)
    staging = worlds / f".staging-{ctx.world_id}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.move(ctx.work.path / STAGED, staging)  # a rename when the work folder is on the same disk
        publish(staging, worlds / ctx.world_id)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    traces = ctx.cache.pop(f"{TRACES}/{ctx.world_id}", None)
    if traces is None:  # made in another process (a Dagster step retried): read them from the bundle
        traces = traces_file_lines((worlds / ctx.world_id / "traces.jsonl.gz").read_bytes())
    publish_world_rows(ctx.data_root / "catalog", worlds / ctx.world_id, traces)  # the rows from the bundle alone
    clear_failed_build(ctx.data_root, ctx.world_id)


STAGE = Stage(
    name="world_bundle",
    check="bundle_complete",
    proves=("the bundle opens, its files match world.json, and tasks use at least 95% of its write tools; "
            "only then is it published"),
    make=make_bundle,
    prove=prove_bundle,
    publish=publish_bundle,
    writes=("README.md", PAGE, "world.json"),
    confined=("prove",),
)

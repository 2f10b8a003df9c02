"""The `world_image` asset: a world's container image, after its bundle, with a blocking check that runs it.

Materialized on request only (job `world_images`, or select it in the UI): it needs a container
engine (a Docker API socket), and building worlds must keep working on machines without one, so
it is in neither `world_build` nor the nightly automation. The engine does the work
(worldfactory.images); the check starts the container, lists its tools over MCP from this host
and runs one task's oracle through it.
"""

# No `from __future__ import annotations` here: Dagster reads the context and resource annotations.
import dagster as dg

from worldfactory.images.probe import ProbeReport, probe_image
from worldfactory.images.world import build_world_image
from worldfactory_dagster.assets.stage import check_metadata
from worldfactory_dagster.pipelines.partitions import world_partitions
from worldfactory_dagster.resources.world_store import WorldStore

GROUP = "images"
CHECK = "image_serves_world"


def image_check_metadata(world_id: str, probe: ProbeReport, store: WorldStore) -> dict:
    """The image check's metadata in the stages' checks' shape (check_metadata); the probe's figures in counts."""
    counts = {"tools": probe.tools, "task_id": probe.task_id, "bundle_identical": probe.bundle_identical,
              "first_answer_seconds": probe.first_answer_seconds}
    reason = f"{probe.step}: {probe.reason}" if probe.reason else ""
    return check_metadata(world_id, probe.passed, reason, counts, store)


@dg.asset(name="world_image", partitions_def=world_partitions, deps=[dg.AssetKey("world_bundle")], group_name=GROUP,
          kinds={"docker"}, pool="world_image",
          check_specs=[dg.AssetCheckSpec(CHECK, asset="world_image", blocking=True, partitions_def=world_partitions,
                                         description="the container serves the published bundle: its files are "
                                                     "the bundle's, MCP lists its tools, one oracle passes")],
          description="An OCI image of the world: shared runtime + one layer with the bundle; MCP on port 8000.")
def world_image(context: dg.AssetExecutionContext, world_store: WorldStore) -> dg.MaterializeResult:
    bundle = world_store.data_root / "worlds" / context.partition_key
    built = build_world_image(bundle, log=context.log.debug)
    probe = probe_image(built.image, bundle)
    if not probe.passed:
        context.log.error(f"{built.world_id}: {CHECK} failed at {probe.step}: {probe.reason}")
    check_meta = image_check_metadata(context.partition_key, probe, world_store)
    return dg.MaterializeResult(
        metadata={"image": built.image, "image_id": built.image_id, "runtime": built.runtime,
                  "bundle_sha256": built.bundle_sha256, "built": built.built,
                  "build_seconds": dg.MetadataValue.float(built.seconds),
                  "layer_bytes": dg.MetadataValue.int(built.layer_bytes),
                  "image_bytes": dg.MetadataValue.int(built.image_bytes)},
        check_results=[dg.AssetCheckResult(check_name=CHECK, passed=probe.passed,
                                           severity=dg.AssetCheckSeverity.ERROR, metadata=check_meta)])

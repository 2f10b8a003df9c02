"""Staleness inside Dagster: a code version per stage, a data version per world, and the nightly condition.

- Every per-world stage carries `code_version` = the engine's source fingerprint (the code that
  writes its files), so the UI shows a stage as stale when the engine changes.
- Every materialization of a world's stage records that world's inputs fingerprint
  (worldfactory.fingerprints: engine source + exactly the template files and brief file the world
  reads) as metadata `inputs_fingerprint` and, in a one-world run, as its data version.
- A world is *current* when the latest `world_bundle` materialization of its partition records its
  current inputs fingerprint and its published bundle (world.json) does too. The nightly
  automation requests only worlds that are not current, so a change to one domain pack rebuilds
  that domain's worlds and nothing else; a run of `world_build` (a backfill, a manual launch)
  skips a current world in its first stage unless the run has the tag `worldfactory/force=true`.
"""

# No `from __future__ import annotations` here: Dagster reads the context annotation.
from collections.abc import Iterable, Sequence

import dagster as dg

from worldfactory.fingerprints import engine_fingerprint, world_inputs_fingerprint
from worldfactory.stages.pipeline import is_up_to_date
from worldfactory.templates import TemplateError
from worldfactory_dagster.resources.world_store import WorldStore, default_store

NIGHTLY_CRON = "0 3 * * *"
INPUTS_KEY = "inputs_fingerprint"
FORCE_TAG = "worldfactory/force"
BUNDLE_KEY = dg.AssetKey("world_bundle")


def code_version() -> str:
    """The engine's world-building source fingerprint (shortened): what every stage's code is."""
    return engine_fingerprint()[:16]


def recorded_inputs(instance: dg.DagsterInstance, world_ids: Iterable[str]) -> dict[str, str]:
    """World ID -> the inputs fingerprint on its latest `world_bundle` materialization (absent: never built)."""
    latest = instance.get_latest_storage_id_by_partition(BUNDLE_KEY, dg.DagsterEventType.ASSET_MATERIALIZATION,
                                                         set(world_ids))
    if not latest:
        return {}
    records = instance.fetch_materializations(dg.AssetRecordsFilter(BUNDLE_KEY, storage_ids=list(latest.values())),
                                              limit=len(latest)).records
    out: dict[str, str] = {}
    for record in records:
        mat = record.asset_materialization
        if mat is not None and mat.partition is not None:
            value = mat.metadata.get(INPUTS_KEY)
            out[mat.partition] = str(value.value) if value is not None else ""
    return out


def stale_worlds(instance: dg.DagsterInstance, store: WorldStore, world_ids: Sequence[str]) -> list[str]:
    """The worlds among `world_ids` that are not current (see the module doc), in the given order.

    With templates that do not load, every world is stale: its build then fails with the reason.
    """
    try:
        ts = store.templates()
    except TemplateError:
        return list(world_ids)
    recorded = recorded_inputs(instance, world_ids)
    stale = []
    for wid in world_ids:
        inputs = world_inputs_fingerprint(ts, wid, store.briefs_dir)
        if recorded.get(wid) != inputs or not is_up_to_date(store.data_root / "worlds" / wid, inputs):
            stale.append(wid)
    return stale


_LAST: dict[tuple, frozenset[str]] = {}  # one evaluation asks once for all stages: (tick, store, keys) -> stale


class WorldInputsChanged(dg.AutomationCondition):
    """True for the world partitions that are not current: never built, or their inputs changed since.

    Every stage of a world gets the same answer, so the nightly request for a world covers all its
    stages (one run per world). Evaluated in the code location (`use_user_code_server=True`).
    """

    def __init__(self, store: WorldStore | None = None) -> None:
        self._store = store
        super().__init__()

    @property
    def name(self) -> str:
        return "world_inputs_changed"

    @property
    def description(self) -> str:
        return ("the world's current inputs fingerprint (engine source, the template files and brief it reads) "
                "differs from the one its latest bundle recorded, or it has none")

    @property
    def requires_cursor(self) -> bool:
        return False

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        keys = frozenset(context.candidate_subset.expensively_compute_partition_keys())
        if not keys:
            return dg.AutomationResult(context, context.get_empty_subset())
        store = self._store or default_store()
        memo = (context.evaluation_time, store.root, store.templates_root, keys)
        if memo not in _LAST:
            _LAST.clear()
            _LAST[memo] = frozenset(stale_worlds(context.asset_graph_view.instance, store, sorted(keys)))
        return dg.AutomationResult(context, context.candidate_subset.compute_intersection_with_partition_keys(
            set(_LAST[memo])))


def nightly_condition(store: WorldStore | None = None) -> dg.AutomationCondition:
    """At 03:00 UTC, rebuild each world whose inputs changed (or that was never built); never two at once."""
    return (dg.AutomationCondition.cron_tick_passed(NIGHTLY_CRON, cron_timezone="UTC")
            & ~dg.AutomationCondition.in_progress()
            & WorldInputsChanged(store)).with_label("nightly, only worlds whose inputs changed")

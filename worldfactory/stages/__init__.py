"""The stages of a world build, in order: each declared once, in its own module, as a Stage.

The engine's build_world, the Dagster assets and checks (assets/stage.py), the confined worker,
the bundle's file list and docs/architecture.md all read STAGES. Adding a stage is one module
that declares STAGE, and one line here.
"""

from __future__ import annotations

from worldfactory.stages import brief, bundle, curated, rollouts, schema, seed, tasks, tools, verifiers
from worldfactory.stages.core import Stage

STAGES: tuple[Stage, ...] = (
    brief.STAGE,
    schema.STAGE,
    seed.STAGE,
    tools.STAGE,
    tasks.STAGE,
    verifiers.STAGE,
    rollouts.STAGE,
    curated.STAGE,
    bundle.STAGE,
)
STAGE_BY_NAME = {s.name: s for s in STAGES}
BUNDLE_FILES = tuple(name for s in STAGES for name in s.writes)  # what a published bundle holds, in order

"""The stages of a world build, in order: each declared once, in its own module, as a Stage.

The engine's build_world, the Dagster assets and checks (assets/stage.py), the confined worker,
the bundle's file list and docs/architecture.md all read STAGES. Adding a stage is one module
that declares STAGE, and one line here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worldfactory import confine
from worldfactory.generate.verifiers import VerifierError
from worldfactory.rollouts import RolloutConfig
from worldfactory.spec import Vocabulary
from worldfactory.stages import brief, bundle, curated, rollouts, schema, seed, tasks, tools, verifiers
from worldfactory.stages import core as S
from worldfactory.stages.core import Stage, StageError

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
S.register_stages(STAGES)  # world_bundle reads the whole list (stages/core.py registered_stages)


# --- the confined worker's side of a stage step (stages/core.py run_stage sends it) ----------------------

class _CaptureWorkDir(S.WorkDir):
    """Reads the real work folder (read-only in the worker); writes are kept and sent back."""

    def __init__(self, path: Path, wid: str) -> None:
        super().__init__(path, wid)
        self.written: dict[str, bytes] = {}

    def write(self, name: str, data: bytes) -> str:
        self.written[name] = data
        return S.sha256(data)

    def read(self, name: str, stage_name: str) -> bytes:
        if name in self.written:
            return self.written[name]
        return super().read(name, stage_name)


_CTX_CACHE: dict[str, Any] = {}


def _job_stage(stage: str, kind: str, world_id: str, work: str, data_root: str, briefs_dir: str | None,
               inputs: str, rollout: dict[str, Any], vocabulary: dict[str, Any] | None = None) -> dict[str, Any]:
    cap = _CaptureWorkDir(Path(work), world_id)
    ctx = S.BuildContext(world_id=world_id, templates=None, work=cap, data_root=Path(data_root),  # type: ignore[arg-type]
                         briefs_dir=Path(briefs_dir) if briefs_dir else None, inputs=inputs,
                         rollout=RolloutConfig(**rollout), cache=_CTX_CACHE,
                         vocabulary=Vocabulary.model_validate(vocabulary) if vocabulary else None)
    result = getattr(STAGE_BY_NAME[stage], kind)(ctx)  # stages write only their files; catalogs come later
    return {"result": result, "writes": cap.written, "usage": ctx.usage.model_dump()}


confine.register_job("stage", _job_stage)
confine.register_errors(StageError, VerifierError)

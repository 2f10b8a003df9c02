"""WorldStore: where a world's stage files, bundle and catalog rows live, and which templates build it.

Assets never touch paths themselves: they ask the store for a build context, so the Dagster
path and the engine path write the same layout under one data root (default `data/`).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from worldfactory.rollouts import RolloutConfig
from worldfactory.stages.core import BuildContext, WorkDir, inputs_fingerprint
from worldfactory.templates import TemplateSet, load_templates

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class WorldStore(dg.ConfigurableResource):
    """Data root (bundles, work folders, catalogs, briefs) and templates folder."""

    root: str = str(PROJECT_ROOT / "data")
    templates_root: str = ""  # empty: the project's world_templates/

    @property
    def data_root(self) -> Path:
        return Path(self.root)

    @property
    def briefs_dir(self) -> Path:
        return self.data_root / "briefs"

    def templates(self) -> TemplateSet:
        return load_templates(self.templates_root or None)

    def work(self, world_id: str) -> WorkDir:
        return WorkDir(self.data_root / "build" / world_id, world_id)

    def context(self, world_id: str, rollout: RolloutConfig | None = None,
                templates: TemplateSet | None = None) -> BuildContext:
        """A world's build context; `templates` (this store's, loaded once by the caller) spares hashing every
        template file again for each world of a batch (load_templates fingerprints the folder on each call)."""
        ts = templates if templates is not None else self.templates()
        return BuildContext(world_id=world_id, templates=ts, work=self.work(world_id), data_root=self.data_root,
                            briefs_dir=self.briefs_dir, inputs=inputs_fingerprint(ts, world_id, self.briefs_dir),
                            rollout=rollout or RolloutConfig())


def default_store() -> WorldStore:
    """The store a code location gets: WORLDFACTORY_DATA / WORLDFACTORY_TEMPLATES, else the project's folders."""
    root = os.environ.get("WORLDFACTORY_DATA")
    return WorldStore(root=str(Path(root).resolve()) if root else str(PROJECT_ROOT / "data"),
                      templates_root=os.environ.get("WORLDFACTORY_TEMPLATES", ""))

"""Which worlds should exist: the registry settings, brief files, and worlds deleted on purpose.

The Dagster sensor and the CLI both ask `wanted_worlds`; a world removed with
`worldfactory delete` is remembered in data/registry/deleted.txt so the seed catalog does not
bring it back until someone builds it by name again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from worldfactory.briefs import brief_world_ids
from worldfactory.seeds import check_world_id, seed_types
from worldfactory.spec import Strict
from worldfactory.templates import REGISTRY_FILE, TemplateError, TemplateSet, load_model


class RegistryConfig(Strict):
    seed_types: list[str] | Literal["all"] = Field(default_factory=list)
    variants: int = Field(default=1, ge=0, le=999)


def registry_world_ids(templates: TemplateSet) -> list[str]:
    """World IDs from world_templates/registry.yaml, checked against the seed catalog."""
    path = templates.root / REGISTRY_FILE
    if not path.is_file():
        return []
    cfg = load_model(path, RegistryConfig)
    known = seed_types(templates)
    chosen = known if cfg.seed_types == "all" else cfg.seed_types
    for i, s in enumerate(chosen):
        if s not in known:
            raise TemplateError(f"{path}: field 'seed_types[{i}]': '{s}' is not a seed type of the catalog; "
                                f"known: {', '.join(known)}")
    if cfg.variants > templates.catalog.variants:
        raise TemplateError(f"{path}: field 'variants': {cfg.variants} is more than the catalog's "
                            f"{templates.catalog.variants} variants per seed type")
    return [f"{s}--v{v:03d}" for s in chosen for v in range(1, cfg.variants + 1)]


def _deleted_file(data_root: Path) -> Path:
    return data_root / "registry" / "deleted.txt"


def deleted_worlds(data_root: Path) -> set[str]:
    path = _deleted_file(data_root)
    return set(path.read_text().split()) if path.is_file() else set()


def _write_deleted(data_root: Path, ids: set[str]) -> None:
    path = _deleted_file(data_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".deleted.txt.tmp-{os.getpid()}")
    tmp.write_text("".join(f"{w}\n" for w in sorted(ids)))
    os.replace(tmp, path)


def mark_deleted(data_root: Path, world_id: str) -> None:
    check_world_id(world_id)
    _write_deleted(data_root, deleted_worlds(data_root) | {world_id})


def unmark_deleted(data_root: Path, world_id: str) -> None:
    ids = deleted_worlds(data_root)
    if world_id in ids:
        _write_deleted(data_root, ids - {world_id})


def wanted_worlds(templates: TemplateSet, data_root: Path) -> tuple[list[str], list[str]]:
    """Registry worlds then brief worlds, minus deliberate deletions; plus one error per bad brief file."""
    brief_ids, errors = brief_world_ids(data_root / "briefs", templates)
    gone = deleted_worlds(data_root)
    ids = [w for w in registry_world_ids(templates) + brief_ids if w not in gone]
    return ids, errors

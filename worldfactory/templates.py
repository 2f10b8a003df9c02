"""Loads and validates world_templates/: domain packs, company types, shared modules, vocabulary.

Every file is validated on load (worldfactory/template_files.py); a bad one raises TemplateError naming the file
and the field.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from worldfactory.spec import CompanyType, DomainPack, Module, Vocabulary
from worldfactory.template_files import DEFAULT_TEMPLATES, TemplateError, _load_dir, load_model

REGISTRY_FILE = "registry.yaml"

class CatalogConfig(BaseModel):
    variants: int
    domains: list[str]
    company_types: list[str]
    examples: list[str]


@dataclass(frozen=True)
class TemplateSet:
    """Everything under one templates folder, validated."""

    root: Path
    domains: dict[str, DomainPack]
    company_types: dict[str, CompanyType]
    modules: dict[str, Module]
    vocabulary: Vocabulary
    catalog: CatalogConfig
    fingerprint: str  # sha256 over every template file, for "is this world up to date?"


def _fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.yaml")):
        if path.name == REGISTRY_FILE:  # which worlds to register does not change any world's bytes
            continue
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _check_references(ts: TemplateSet) -> None:
    from worldfactory.packs import check_set

    lines = check_set(ts.root, ts.domains, ts.modules, ts.company_types)
    if lines:
        raise TemplateError("\n".join(lines))
    cat_path = ts.root / "catalog.yaml"
    for i, name in enumerate(ts.catalog.domains):
        if name not in ts.domains:
            raise TemplateError(f"{cat_path}: field 'domains[{i}]': unknown domain '{name}'")
    for i, name in enumerate(ts.catalog.company_types):
        if name not in ts.company_types:
            raise TemplateError(f"{cat_path}: field 'company_types[{i}]': unknown company type '{name}'")


def load_templates(root: Path | str | None = None) -> TemplateSet:
    """Load and validate a templates folder (default: the project's world_templates/)."""
    base = Path(root) if root is not None else DEFAULT_TEMPLATES
    return _load_cached(base.resolve(), _fingerprint(base.resolve()))


@lru_cache(maxsize=8)
def _load_cached(root: Path, fingerprint: str) -> TemplateSet:
    if not root.is_dir():
        raise TemplateError(f"{root}: templates folder not found")
    ts = TemplateSet(
        root=root,
        domains=_load_dir(root / "domains", DomainPack),
        company_types=_load_dir(root / "company_types", CompanyType),
        modules=_load_dir(root / "modules", Module),
        vocabulary=load_model(root / "vocabulary.yaml", Vocabulary),
        catalog=load_model(root / "catalog.yaml", CatalogConfig),
        fingerprint=fingerprint,
    )
    _check_references(ts)
    return ts

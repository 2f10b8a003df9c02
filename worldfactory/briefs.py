"""Brief files: YAML dropped into data/briefs/ that describe one company in the engine's terms.

A brief names a domain pack and a company type and may override the company's name and policy
values. `data/briefs/harbor-mutual.yaml` becomes worlds `brief.harbor-mutual--v001` and up.
Free-text briefs arrive with the LLM path; these are the structured kind.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field

from worldfactory.seeds import BRIEF_PREFIX, SeedError
from worldfactory.spec import Strict
from worldfactory.templates import TemplateError, TemplateSet, load_model

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
BRIEF_ID_RE = re.compile(rf"^{BRIEF_PREFIX}\.(?P<slug>[a-z0-9][a-z0-9-]*)--v(?P<variant>\d{{3}})$")


class BriefFile(Strict):
    """What a brief file may say; unknown keys are errors."""

    domain: str
    company_type: str
    company_name: str | None = Field(default=None, min_length=2, max_length=80)
    rules: dict[str, float] = Field(default_factory=dict)
    variants: int = Field(default=1, ge=1, le=999)


def parse_brief_world_id(world_id: str) -> tuple[str, int]:
    m = BRIEF_ID_RE.match(world_id)
    if not m or int(m["variant"]) < 1:
        raise SeedError(f"'{world_id}' is not a brief world ID; expected {BRIEF_PREFIX}.<brief file stem>--v<NNN>, "
                        f"e.g. {BRIEF_PREFIX}.harbor-mutual--v001 for data/briefs/harbor-mutual.yaml")
    return m["slug"], int(m["variant"])


def load_brief_file(path: Path, templates: TemplateSet) -> BriefFile:
    """Validate a brief file against the templates; errors name the file and the field."""
    if not SLUG_RE.match(path.stem):
        raise TemplateError(f"{path}: a brief file's name must be a slug (lowercase letters, digits, '-')")
    if not path.is_file():
        raise TemplateError(f"{path}: no such brief file")
    brief = load_model(path, BriefFile)
    if brief.domain not in templates.domains:
        raise TemplateError(f"{path}: field 'domain': unknown domain pack '{brief.domain}'; "
                            f"known: {', '.join(sorted(templates.domains))}")
    if brief.company_type not in templates.company_types:
        raise TemplateError(f"{path}: field 'company_type': unknown company type '{brief.company_type}'; "
                            f"known: {', '.join(sorted(templates.company_types))}")
    domain = templates.domains[brief.domain]
    ctype = templates.company_types[brief.company_type]
    modules = list(domain.modules) + [m for m in domain.optional_modules if m in ctype.extra_modules]
    known = sorted({r.name for m in modules for r in templates.modules[m].rules} | {r.name for r in domain.rules})
    for name in brief.rules:
        if name not in known:
            raise TemplateError(f"{path}: field 'rules.{name}': no such policy value in this world; "
                                f"known: {', '.join(known)}")
    return brief


def brief_world_ids(briefs_dir: Path, templates: TemplateSet) -> tuple[list[str], list[str]]:
    """World IDs of every brief file in the folder, and one error line per file that is not valid."""
    ids: list[str] = []
    errors: list[str] = []
    if not briefs_dir.is_dir():
        return ids, errors
    for path in sorted(briefs_dir.glob("*.yaml")):
        try:
            bf = load_brief_file(path, templates)
        except TemplateError as exc:
            errors.append(str(exc))
            continue
        ids += [f"{BRIEF_PREFIX}.{path.stem}--v{v:03d}" for v in range(1, bf.variants + 1)]
    return ids, errors

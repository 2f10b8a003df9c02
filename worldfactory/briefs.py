"""Brief files dropped into data/briefs/: one company each, in the engine's terms or in free text.

`<slug>.yaml` names a domain pack and a company type and may override the company's name and
policy values. `<slug>.md` is free text (optional YAML front matter: `company_type`,
`company_name`, `variants`, `rules`; the rest is the description): a model drafts its domain pack
(worldfactory.drafting). Either becomes worlds `brief.<slug>--v001` and up; one slug has one file.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from worldfactory.seeds import BRIEF_ID_RE, BRIEF_PREFIX, SeedError, _expand, expand_seed
from worldfactory.seeds import check_world_id as check_id_form  # the form only; check_world_id here reads files
from worldfactory.spec import NAME_PATTERN, Brief, DomainPack, Strict
from worldfactory.template_files import TemplateError, _format_errors, load_model
from worldfactory.templates import TemplateSet
from worldfactory.variants import MIX_FAMILIES

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")
FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\r?\n(?P<head>.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
SUFFIXES = (".yaml", ".md")
MAX_SCALE = 2.5  # a brief's scale at most (the national company type is 1.6); rows stay under the seed's bounds
MAX_MIX = 8.0  # a family's quota at most this many times its own
# The model that drafts a free-text brief's pack: an input of such a world (another model drafts another
# pack, so the fingerprint hashes its name). Here, below the drafting layer, so that fingerprints can read it.
ENV_MODEL = "WORLDFACTORY_LLM_MODEL"


def model_from_env() -> str:
    """The drafting model's name ($WORLDFACTORY_LLM_MODEL), empty when none is set."""
    return os.environ.get(ENV_MODEL, "").strip()


class BriefFile(Strict):
    """What a brief file may say; unknown keys are errors."""

    domain: str
    company_type: str
    company_name: str | None = Field(default=None, min_length=2, max_length=80)
    rules: dict[str, float] = Field(default_factory=dict)
    variants: int = Field(default=1, ge=1, le=999)
    # a targeted world (worldfactory.evals.target) sets its mix and size; empty/None: the variant's own
    task_mix: dict[str, float] = Field(default_factory=dict)  # family -> its quota times this
    scale: float | None = Field(default=None, gt=0.1, le=MAX_SCALE)
    distractors: float = Field(default=0.0, ge=0.0, le=1.0)  # share of names given a look-alike's first word
    twins: int | None = Field(default=None, ge=0, le=3)  # near-duplicate pairs per kind (None: the variant's own)
    refusals: int = Field(default=1, ge=1, le=8)  # rule-decided tasks: refused candidates drawn per allowed one
    named: bool = False  # families keep only tasks that find a record by a name of several words
    origin: str = Field(default="", max_length=2000)  # why the brief exists (the run and causes it targets)


class TextBrief(Strict):
    """A free-text brief: front matter (all optional) and the description a model drafts a pack from."""

    company_type: str = ""  # empty: the catalog's first company type
    company_name: str | None = Field(default=None, min_length=2, max_length=80)
    rules: dict[str, float] = Field(default_factory=dict)  # policy values the drafted pack must declare
    variants: int = Field(default=1, ge=1, le=999)
    description: str = Field(min_length=1, max_length=20_000)


def parse_brief_world_id(world_id: str) -> tuple[str, int]:
    m = BRIEF_ID_RE.match(world_id)
    if not m or int(m["variant"]) < 1:
        raise SeedError(f"'{world_id}' is not a brief world ID; expected {BRIEF_PREFIX}.<brief file stem>--v<NNN>, "
                        f"e.g. {BRIEF_PREFIX}.harbor-mutual--v001 for data/briefs/harbor-mutual.yaml")
    return m["slug"], int(m["variant"])


def brief_path(briefs_dir: Path, slug: str) -> Path:
    """The one brief file of a slug: `<slug>.yaml` or `<slug>.md` (the .yaml path when neither exists)."""
    found = [briefs_dir / f"{slug}{s}" for s in SUFFIXES if (briefs_dir / f"{slug}{s}").is_file()]
    if len(found) > 1:
        raise TemplateError(f"{found[1]}: {found[0].name} describes the same world; keep one brief file per slug")
    return found[0] if found else briefs_dir / f"{slug}.yaml"


def is_text_brief(path: Path) -> bool:
    return path.suffix == ".md"


def load_brief_file(path: Path, templates: TemplateSet) -> BriefFile:
    """Validate a brief file against the templates; errors name the file and the field."""
    if not SLUG_RE.match(path.stem):
        raise TemplateError(f"{path}: a brief file's name must be a slug (lowercase letters, digits, '-')")
    if not path.is_file():
        raise TemplateError(f"{path}: no such brief file (nor {path.stem}.md)")
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
    for family, factor in brief.task_mix.items():
        if family not in MIX_FAMILIES:
            raise TemplateError(f"{path}: field 'task_mix.{family}': no such task family; "
                                f"known: {', '.join(MIX_FAMILIES)}")
        if not 0 < factor <= MAX_MIX:
            raise TemplateError(f"{path}: field 'task_mix.{family}': {factor} is not in (0, {MAX_MIX:g}]")
    return brief


def split_front_matter(text: str) -> tuple[dict[str, object], str]:
    """(front matter as a mapping, the rest): a text starting with a `---` line up to the next `---` line."""
    m = FRONT_MATTER_RE.match(text)
    if not m:
        return {}, text
    head = yaml.safe_load(m["head"]) if m["head"].strip() else {}
    if not isinstance(head, dict):
        raise ValueError("the front matter (between the --- lines) must be a mapping")
    return head, text[m.end():]


def load_text_brief(path: Path, templates: TemplateSet) -> TextBrief:
    """Validate a free-text brief file: its front matter's keys and company type; errors name file and field."""
    if not SLUG_RE.match(path.stem):
        raise TemplateError(f"{path}: a brief file's name must be a slug (lowercase letters, digits, '-')")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TemplateError(f"{path}: no such brief file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path}: cannot read: {exc}") from exc
    return parse_text_brief(path, text, templates)


def parse_text_brief(path: Path, text: str, templates: TemplateSet) -> TextBrief:
    """A free-text brief's content, validated; `path` names it in errors."""
    try:
        head, body = split_front_matter(text)
    except (yaml.YAMLError, ValueError) as exc:
        raise TemplateError(f"{path}: front matter: {exc}") from exc
    if "description" in head:
        raise TemplateError(f"{path}: field 'description': the description is the text after the front matter")
    data = {**head, "description": body.strip()}
    try:
        brief = TextBrief.model_validate(data)
    except ValidationError as exc:
        raise TemplateError(_format_errors(path, exc, data)) from exc
    if not brief.company_type:
        brief.company_type = templates.catalog.company_types[0]
    elif brief.company_type not in templates.company_types:
        raise TemplateError(f"{path}: field 'company_type': unknown company type '{brief.company_type}'; "
                            f"known: {', '.join(sorted(templates.company_types))}")
    for name in brief.rules:
        if not re.match(NAME_PATTERN, name):
            raise TemplateError(f"{path}: field 'rules.{name}': a policy value's name is lowercase letters, "
                                f"digits and '_'")
    return brief


def write_text_brief(briefs_dir: Path, slug: str, text: str, templates: TemplateSet,
                     front_matter: dict[str, object] | None = None) -> Path:
    """`worldfactory brief new`: write data/briefs/<slug>.md, validated; an existing brief is never replaced."""
    if not SLUG_RE.match(slug):
        raise TemplateError(f"'{slug}': a brief's name must be a slug (lowercase letters, digits, '-')")
    for suffix in SUFFIXES:
        if (briefs_dir / f"{slug}{suffix}").exists():
            raise TemplateError(f"{briefs_dir / (slug + suffix)}: already exists; edit it or delete it first")
    head = {k: v for k, v in (front_matter or {}).items() if v not in (None, "", {})}
    body = text.strip() + "\n"
    content = body
    if head or FRONT_MATTER_RE.match(body):  # a description that starts with a --- line keeps it as text
        content = "---\n" + (yaml.safe_dump(head, sort_keys=True, allow_unicode=True) if head else "") + "---\n" + body
    path = briefs_dir / f"{slug}.md"
    parse_text_brief(path, content, templates)
    briefs_dir.mkdir(parents=True, exist_ok=True)
    tmp = briefs_dir / f".{slug}.md.tmp-{os.getpid()}"
    tmp.write_text(content, encoding="utf-8")
    os.replace(tmp, path)
    return path


def check_world_id(world_id: str, templates: TemplateSet, briefs_dir: Path | None) -> None:
    """Fail fast on a bad world ID or brief file, before any work starts (a text brief's pack comes later)."""
    if not world_id.startswith(f"{BRIEF_PREFIX}."):
        expand_seed(world_id, templates)
        return
    slug, _ = parse_brief_world_id(world_id)
    if briefs_dir is None:
        raise SeedError(f"'{world_id}' comes from a brief file, but no briefs folder was given")
    path = brief_path(briefs_dir, slug)
    load_text_brief(path, templates) if is_text_brief(path) else load_brief_file(path, templates)


def templates_with(templates: TemplateSet, pack: DomainPack) -> TemplateSet:
    """The templates plus one domain pack (a drafted one), for the world built from it."""
    return dataclasses.replace(templates, domains={**templates.domains, pack.name: pack})


def brief_world_ids(briefs_dir: Path, templates: TemplateSet) -> tuple[list[str], list[str]]:
    """World IDs of every brief file in the folder, and one error line per file that is not valid."""
    ids: list[str] = []
    errors: list[str] = []
    if not briefs_dir.is_dir():
        return ids, errors
    slugs = sorted({p.stem for s in SUFFIXES for p in briefs_dir.glob(f"*{s}") if not p.name.startswith(".")})
    for slug in slugs:
        try:
            path = brief_path(briefs_dir, slug)
            variants = (load_text_brief(path, templates) if is_text_brief(path) else
                        load_brief_file(path, templates)).variants
        except TemplateError as exc:
            errors.append(str(exc))
            continue
        ids += [f"{BRIEF_PREFIX}.{slug}--v{v:03d}" for v in range(1, variants + 1)]
    return ids, errors


def expand_world(world_id: str, templates: TemplateSet, briefs_dir: Path | None = None,
                 pack: DomainPack | None = None) -> Brief:
    """A world ID of either kind: a catalog seed, or `brief.<file stem>--v<NNN>` from a brief file.

    A free-text brief (`<slug>.md`) has no domain pack of its own: `pack` is the one drafted for it."""
    check_id_form(world_id)
    if world_id.startswith(f"{BRIEF_PREFIX}."):
        slug, variant = parse_brief_world_id(world_id)
        if briefs_dir is None:
            raise SeedError(f"'{world_id}' comes from a brief file, but no briefs folder was given")
        path = brief_path(briefs_dir, slug)
        if is_text_brief(path):
            if pack is None:
                raise SeedError(f"'{world_id}': {path} is a free-text brief; its domain pack is drafted first")
            tb = load_text_brief(path, templates)
            return _expand(world_id, pack.name, tb.company_type, variant, templates_with(templates, pack),
                           company_name=tb.company_name, rule_overrides=tb.rules)
        bf = load_brief_file(path, templates)
        return _expand(world_id, bf.domain, bf.company_type, variant, templates,
                       company_name=bf.company_name, rule_overrides=bf.rules, task_mix=bf.task_mix or None,
                       scale=bf.scale, distractors=bf.distractors, twins=bf.twins,
                       refusals=bf.refusals, named=bf.named)
    return expand_seed(world_id, templates)

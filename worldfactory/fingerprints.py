"""A world's inputs fingerprint: the engine's world-building source plus exactly the template files and brief it reads.

A world's bytes are a pure function of the engine code that builds worlds, the template files its seed type
composes and, for a brief world, its brief file. Hashing only those files means a change to one
domain pack, company type or shared module marks stale only the worlds that read it; the others
stay up to date. The fingerprint is recorded in each bundle's world.json (`inputs_fingerprint`)
and, through Dagster, as the data version of every stage of that world's partition.

Which files a world reads (see worldfactory/seeds.py and worldfactory/generate/schema.py):
`domains/<domain>.yaml`, `company_types/<company type>.yaml`, `modules/<m>.yaml` for every module
the world composes (the domain's modules plus its optional modules the company type enables) and
`vocabulary.yaml`; for a free-text brief (`<slug>.md`), whose pack a model drafts, its company type,
`vocabulary.yaml`, every shared module and the model's name. `catalog.yaml` and `registry.yaml` only
say which worlds exist, never what is in one, so they are not part of any world's fingerprint.

The engine's code is hashed the same way: every module under worldfactory/ except the applications
around the build (NOT_WORLD_CODE: the CLI, site, adapters, images, check-pack's dry run, the draft
step), which read or ship worlds but never write a byte of one (a text brief's world hashes the pack
its draft step recorded instead). Editing the CLI's help text or the catalog
site marks no world stale; editing a generator or a stage marks them all stale. The Dagster layer
(pipelines/, assets/, resources/) lies outside worldfactory/ and is never hashed: it only orders the
engine's stages.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import yaml

import worldfactory
from worldfactory.briefs import TextBrief, brief_path, load_text_brief, model_from_env, parse_brief_world_id
from worldfactory.drafts import recorded_pack_sha256, text_brief_file
from worldfactory.seeds import BRIEF_PREFIX, WORLD_ID_RE, SeedError
from worldfactory.templates import REGISTRY_FILE, TemplateError, TemplateSet

NOT_INPUTS = frozenset({"catalog.yaml", REGISTRY_FILE})  # which worlds exist, never what is in one

# The modules and packages of worldfactory/ that the engine fingerprint leaves out, and why, by dotted path
# under worldfactory (`cli` is cli.py or a cli/ package, `evals.stats` is evals/stats.py). A world's build
# never imports them (tests/test_fingerprints.py follows the build's imports to check it), so no edit to them
# can change a world's bytes. Every other module is in: a new module is hashed unless it is named here.
NOT_WORLD_CODE: dict[str, str] = {
    "cli": "the command line: parses arguments, prints tables, and calls build_world or the Dagster driver",
    "cli_eval": "the `eval` commands: evaluation runs over published worlds",
    "cli_audit": "the `audit` command: prints the realism audit of published worlds",
    "errors": "the errors the CLI prints plainly: a list of the engine's error classes",
    "site": "the catalog site: reads published bundles and catalog rows",
    "adapters": "exports to RL trainers: read published bundles",
    "images": "container images of the engine and of published worlds: package bundles, never write them",
    "env": "the RL environment over a published world: serves a bundle",
    "parallel": "the process pool that runs builds side by side: the same bytes as one at a time",
    "registry": "which worlds should exist, never what is in one (as catalog.yaml and registry.yaml)",
    "dryrun": "check-pack's dry run: builds a pack's small world in a temporary folder, never a published one",
    "drafting": "the draft step: records a text brief's pack in data/drafts, which a world's fingerprint hashes",
    "pack_flow": "check-pack's notes on statuses no row can hold: read by the dry run only",
    "module_reference": "writes the shared module reference into world_templates/README.md",
}


def left_out(relative: Path) -> bool:
    """Whether a source file (relative to worldfactory/) lies in a module or package NOT_WORLD_CODE names."""
    parts = relative.with_suffix("").parts
    return any(".".join(parts[:i]) in NOT_WORLD_CODE for i in range(1, len(parts) + 1))


def engine_module_files(package: Path) -> list[Path]:
    """The engine's world-building source files under a worldfactory/ folder: its .py files, less NOT_WORLD_CODE."""
    return [p for p in sorted(package.rglob("*.py")) if not left_out(p.relative_to(package))]


def source_fingerprint(package: Path) -> str:
    """sha256 over the world-building source files of a worldfactory/ folder, each by its relative path."""
    digest = hashlib.sha256()
    for path in engine_module_files(package):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.cache
def engine_fingerprint() -> str:
    """This engine's world-building source fingerprint: a world is up to date only if this and its inputs match."""
    return source_fingerprint(Path(worldfactory.__file__).parent)


@functools.lru_cache(maxsize=16)
def _template_digests(root: Path, fingerprint: str) -> dict[str, str]:
    """sha256 of every template file, by path relative to the root (cached per templates content)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.yaml"))}


def _seed_type(templates: TemplateSet, world_id: str, briefs_dir: Path | None) -> tuple[str, str] | None:
    """(domain, company type) of a world ID, or None when it cannot be told (the build says why)."""
    if world_id.startswith(f"{BRIEF_PREFIX}."):
        if briefs_dir is None:
            return None
        try:
            data = yaml.safe_load(brief_path(briefs_dir, parse_brief_world_id(world_id)[0]).read_text())
        except (OSError, yaml.YAMLError, SeedError, TemplateError):
            return None
        if not isinstance(data, dict):
            return None
        domain, company = data.get("domain"), data.get("company_type")
    else:
        m = WORLD_ID_RE.match(world_id)
        if not m:
            return None
        domain, company = m["domain"], m["company"]
    if domain not in templates.domains or company not in templates.company_types:
        return None
    return str(domain), str(company)


def _text_brief(templates: TemplateSet, world_id: str, briefs_dir: Path | None) -> TextBrief | None:
    """A free-text brief world's brief (its pack is drafted by a model), or None."""
    path = text_brief_file(world_id, briefs_dir)
    if path is None:
        return None
    try:
        return load_text_brief(path, templates)
    except (SeedError, TemplateError):
        return None


def world_template_files(templates: TemplateSet, world_id: str, briefs_dir: Path | None = None) -> list[str]:
    """The template files (relative to the templates root) that this world's build reads.

    Every file when the world's seed type cannot be told (a missing or broken brief file): the
    fingerprint then changes with any template, and the build itself reports what is wrong.
    """
    text = _text_brief(templates, world_id, briefs_dir)
    if text is not None:  # a drafted pack may compose any shared module
        return sorted({f"company_types/{text.company_type}.yaml", "vocabulary.yaml",
                       *(f"modules/{m}.yaml" for m in templates.modules)})
    seed = _seed_type(templates, world_id, briefs_dir)
    if seed is None:
        return sorted(n for n in _template_digests(templates.root, templates.fingerprint) if n not in NOT_INPUTS)
    domain_name, company_type = seed
    domain, ctype = templates.domains[domain_name], templates.company_types[company_type]
    modules = list(domain.modules) + [m for m in domain.optional_modules if m in ctype.extra_modules]
    return sorted({f"domains/{domain_name}.yaml", f"company_types/{company_type}.yaml", "vocabulary.yaml",
                   *(f"modules/{m}.yaml" for m in modules)})


def brief_file_digest(world_id: str, briefs_dir: Path | None) -> str:
    """sha256 of a brief world's brief file ("missing" if absent); empty for catalog worlds."""
    if not world_id.startswith(f"{BRIEF_PREFIX}.") or briefs_dir is None:
        return ""
    try:
        path = brief_path(briefs_dir, parse_brief_world_id(world_id)[0])
    except SeedError:
        return "invalid"
    except TemplateError:
        return "ambiguous"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def world_inputs_fingerprint(templates: TemplateSet, world_id: str, briefs_dir: Path | None = None) -> str:
    """Hash of what one world's bytes depend on: engine source, its template files, its brief file."""
    digests = _template_digests(templates.root, templates.fingerprint)
    parts = [f"engine\0{engine_fingerprint()}"]
    parts += [f"{name}\0{digests.get(name, 'missing')}" for name in world_template_files(templates, world_id,
                                                                                        briefs_dir)]
    parts.append(f"brief\0{brief_file_digest(world_id, briefs_dir)}")
    if _text_brief(templates, world_id, briefs_dir) is not None:  # another model drafts another pack
        model, path = model_from_env(), text_brief_file(world_id, briefs_dir)
        parts.append(f"model\0{model}")
        assert path is not None  # _text_brief found it
        parts.append(f"draft\0{recorded_pack_sha256(path, model)}")  # the pack its draft step recorded
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()

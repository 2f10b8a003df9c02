"""Seed catalog and seed expansion: (seed type, variant) -> Brief, deterministically.

A world ID is `<domain>.<company type>--v<NNN>`. Its generation seed comes from the ID and the
generator version, and every random choice in every stage flows from it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import date, timedelta

from worldfactory import GENERATOR_VERSION
from worldfactory.draws import SCALE_SPREAD, generation_seed, stage_rng
from worldfactory.spec import Brief, CompanyType, DomainPack
from worldfactory.templates import TemplateSet
from worldfactory.variants import variation

# World IDs: \Z, not $ (which also matches before a final newline: "x--v001\n" was accepted, then broke
# every path and catalog partition that named it). world_id_problem is the one check of the form.
WORLD_ID_RE = re.compile(r"^(?P<domain>[a-z0-9-]+)\.(?P<company>[a-z0-9-]+)--v(?P<variant>\d{3})\Z")
EPOCH = date(2026, 1, 1)
BRIEF_PREFIX = "brief"
BRIEF_ID_RE = re.compile(rf"^{BRIEF_PREFIX}\.(?P<slug>[a-z0-9][a-z0-9-]*)--v(?P<variant>\d{{3}})\Z")


class SeedError(ValueError):
    """A world ID or seed type that the catalog does not know."""


def world_id_problem(world_id: object) -> str:
    """Why this is not a world ID in form (catalog or brief), or ''. Shown with ascii(), so a newline, a
    control character or a terminal escape in it is seen and not run."""
    if isinstance(world_id, str) and len(world_id) <= 200 and (WORLD_ID_RE.match(world_id)
                                                                 or BRIEF_ID_RE.match(world_id)):
        return ""
    shown = ascii(world_id)[:120]
    return (f"{shown} is not a world ID; expected <domain>.<company type>--v<NNN> (e.g. "
            f"insurance-claims.regional--v001) or {BRIEF_PREFIX}.<slug>--v<NNN>: lowercase letters, digits "
            f"and '-', no spaces or control characters (see `worldfactory seeds`)")


def check_world_id(world_id: str) -> str:
    """The world ID, or SeedError saying why it is not one (every entry point that takes an ID calls this)."""
    why = world_id_problem(world_id)
    if why:
        raise SeedError(why)
    return world_id


@dataclass(frozen=True)
class WorldId:
    domain: str
    company_type: str
    variant: int

    @property
    def seed_type(self) -> str:
        return f"{self.domain}.{self.company_type}"

    def __str__(self) -> str:
        return f"{self.seed_type}--v{self.variant:03d}"


def parse_world_id(world_id: str, templates: TemplateSet) -> WorldId:
    """Parse and check a world ID against the templates; errors say what would be valid."""
    m = WORLD_ID_RE.match(check_world_id(world_id))
    if not m:
        raise SeedError(f"'{world_id}' is not a catalog world ID; expected <domain>.<company type>--v<NNN>, "
                        f"e.g. insurance-claims.regional--v001 (see `worldfactory seeds`)")
    wid = WorldId(m["domain"], m["company"], int(m["variant"]))
    if wid.domain not in templates.domains:
        raise SeedError(f"'{world_id}': unknown domain '{wid.domain}'; known: {', '.join(sorted(templates.domains))}")
    if wid.company_type not in templates.company_types:
        raise SeedError(
            f"'{world_id}': unknown company type '{wid.company_type}'; "
            f"known: {', '.join(sorted(templates.company_types))}"
        )
    if wid.variant < 1:
        raise SeedError(f"'{world_id}': variants start at v001")
    return wid


def seed_types(templates: TemplateSet) -> list[str]:
    """Every seed type the catalog builds, in catalog order."""
    return [f"{d}.{c}" for d in templates.catalog.domains for c in templates.catalog.company_types]


def catalog_world_ids(templates: TemplateSet, variants: int | None = None) -> list[str]:
    n = templates.catalog.variants if variants is None else variants
    return [f"{s}--v{v:03d}" for s in seed_types(templates) for v in range(1, n + 1)]


def _nice(value: float, integer: bool) -> float:
    """Round a jittered policy value the way a company would write it down."""
    if integer:
        return float(max(1, round(value)))
    if value >= 1000:
        return float(round(value / 50) * 50)
    if value >= 10:
        return float(round(value))
    return round(value, 2)


def expand_seed(world_id: str, templates: TemplateSet) -> Brief:
    """Deterministically expand a catalog world ID into a Brief."""
    wid = parse_world_id(world_id, templates)
    return _expand(str(wid), wid.domain, wid.company_type, wid.variant, templates)


def company_name_for(world_id: str, domain: DomainPack, ctype: CompanyType, words: list[str], variant: int) -> str:
    """A name no other world of the catalog has: "<word> <pack's trade word> <company type's suffix>".

    The variants of one seed type take the (word, suffix) pairs of one shuffle in turn, so they
    never share a name while there are pairs left (46 words x 3 suffixes); the pack's trade word
    keeps domains apart and the suffix keeps company types apart (both checked unique when the
    templates load).
    """
    pairs = [(w, s) for w in words for s in ctype.name_suffixes]
    random.Random(f"{world_id.split('--')[0]}:company-names").shuffle(pairs)
    word, suffix = pairs[(variant - 1) % len(pairs)]
    return f"{word} {domain.trade_word} {suffix}"


def _expand(world_id: str, domain_name: str, company_type: str, variant: int, templates: TemplateSet,
            company_name: str | None = None, rule_overrides: dict[str, float] | None = None,
            task_mix: dict[str, float] | None = None, scale: float | None = None,
            distractors: float = 0.0, twins: int | None = None, refusals: int = 1,
            named: bool = False) -> Brief:
    """The brief of one world; a brief file's overrides (company name, rule values, task mix, scale, look-alike
    names, near-duplicate pairs, refused candidates per allowed one, named records only) last, after every
    draw, so the draws (and the rest of the world) stay what they were."""
    seed = generation_seed(world_id)
    rng = stage_rng(seed, "brief")
    domain = templates.domains[domain_name]
    ctype = templates.company_types[company_type]
    vocab = templates.vocabulary

    rng.choice(vocab.company_words)  # the old name draws stay, so the clock, scale and rules after them do too
    rng.choice(ctype.name_suffixes)
    drawn_name = company_name_for(world_id, domain, ctype, vocab.company_words, variant)
    clock = EPOCH + timedelta(days=rng.randint(0, 300))
    modules = list(domain.modules) + [m for m in domain.optional_modules if m in ctype.extra_modules]
    structure = variation(domain, ctype, templates, variant, seed)
    modules += structure.extra_modules

    rules: dict[str, float] = {}
    all_rules = [r for m in modules for r in templates.modules[m].rules] + list(domain.rules)
    for rule in all_rules:
        factor = ctype.rule_factors.get(rule.name, 1.0) * rng.uniform(0.85, 1.15)
        rules[rule.name] = _nice(rule.value * factor, rule.integer)
    rules.update(rule_overrides or {})

    return Brief(
        world_id=world_id,
        seed_type=f"{domain_name}.{company_type}",
        domain=domain_name,
        company_type=company_type,
        variant=variant,
        generation_seed=seed,
        generator_version=GENERATOR_VERSION,
        company_name=company_name or drawn_name,
        clock=clock.isoformat(),
        scale=scale if scale is not None else round(ctype.scale * rng.uniform(*SCALE_SPREAD), 3),
        modules=modules,
        rules=rules,
        departments=list(domain.departments),
        omitted_tools=structure.omitted_tools,
        task_mix=dict(sorted(task_mix.items())) if task_mix else structure.task_mix,
        distractors=distractors,
        twins=structure.twins if twins is None else twins,
        refusals=refusals,
        named=named,
    )

"""Variants that differ in structure: what each variant of a seed type adds or leaves out.

Names, clock, rule values and volumes already differ per variant. On top of that each variant gets
a structure: which of the domain's optional modules it adds beyond its company type's (new tables,
their tools and rules), which update tools it lacks (an agent must then make do with the workflow
steps), its task mix (each family's quota scaled, the hard tier's discover and handbook too) and how
many near-duplicate pairs it seeds (``twins``, 0 to 3: the distractors knob; generate/twins.py). v001
is the full world the company type describes. Later variants take distinct structures: the seed type's
options are numbered as bit masks, and a permutation drawn from the seed type's own seed hands each
variant its own mask, so the 20 variants of a seed type have 20 different (schema, tool set) pairs
wherever the pack offers at least 20 choices. Tasks never need a left-out tool: they are drawn from the
tools that exist.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from worldfactory.draws import generation_seed, stage_rng
from worldfactory.spec import CompanyType, DomainPack, TableDef
from worldfactory.templates import TemplateSet

MIX_FACTORS = (0.75, 1.0, 1.25)  # a family's quota in a later variant, times one of these
# the hard families last: the earlier families' factors keep their draws
MIX_FAMILIES = ("lookup_act", "conditional", "bulk", "workflow", "retrieval", "decline", "discover", "handbook")
TWIN_LEVELS = (0, 1, 2, 3)  # near-duplicate pairs per kind a later variant seeds (v001: DEFAULT_TWINS)
DEFAULT_TWINS = 2
MASKS_DRAWN = 256  # distinct structures drawn per seed type (variants beyond reuse them in turn)


class Variation(BaseModel):
    """One variant's structure, recorded in its brief."""

    extra_modules: list[str] = Field(default_factory=list)
    omitted_tools: list[str] = Field(default_factory=list)
    task_mix: dict[str, float] = Field(default_factory=dict)
    twins: int = DEFAULT_TWINS  # distractors: near-duplicate pairs per kind (generate/twins.py)


def _update_tool(table: TableDef) -> str:
    return "update_" + table.singular.lower().replace(" ", "_").replace("-", "_")


def options(domain: DomainPack, ctype: CompanyType, templates: TemplateSet) -> tuple[list[str], list[str]]:
    """The seed type's structural choices: optional modules its company type does not already add, and
    update tools its variants may leave out (tables of the domain and of the modules it always has)."""
    modules = [m for m in domain.optional_modules if m not in ctype.extra_modules]
    tables = list(domain.tables) + [t for m in domain.modules for t in templates.modules[m].tables]
    updates = sorted({_update_tool(t) for t in tables if t.update})
    return modules, updates


def variation(domain: DomainPack, ctype: CompanyType, templates: TemplateSet, variant: int,
              seed: int) -> Variation:
    """The structure of one variant; v001 (and any variant of a pack with no choices) is the full world."""
    modules, updates = options(domain, ctype, templates)
    bits = len(modules) + len(updates)
    if variant <= 1 or bits == 0:
        return Variation()
    type_rng = stage_rng(generation_seed(f"{domain.name}.{ctype.name}"), "variants")
    masks = type_rng.sample(range(1, 2 ** bits), min(2 ** bits - 1, MASKS_DRAWN))
    mask = masks[(variant - 2) % len(masks)]
    chosen = [i for i in range(bits) if mask >> i & 1]
    rng = stage_rng(seed, "variation")
    return Variation(
        extra_modules=[modules[i] for i in chosen if i < len(modules)],
        omitted_tools=[updates[i - len(modules)] for i in chosen if i >= len(modules)],
        task_mix={f: rng.choice(MIX_FACTORS) for f in MIX_FAMILIES},
        twins=stage_rng(seed, "variation.twins").choice(TWIN_LEVELS),  # its own stream: the mix keeps its draws
    )

"""Variants differ in structure: optional modules, left-out update tools and task mix drawn per
variant, at least 18 distinct (schema, tool set) pairs among the 20 variants of every seed type, and
a variant that lacks a tool builds with tasks that never call it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.conftest import small_templates_at
from worldfactory.generate.bundle import tool_set_sha256
from worldfactory.generate.schema import build_spec, schema_sql
from worldfactory.generate.tools import tool_specs
from worldfactory.requester import ASK_TOOL
from worldfactory.runtime.world import World
from worldfactory.seeds import expand_seed
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import TemplateSet, load_templates


def _pair(world_id: str, ts: TemplateSet) -> tuple[str, str]:
    spec = build_spec(expand_seed(world_id, ts), ts)
    return hashlib.sha256(schema_sql(spec).encode()).hexdigest(), tool_set_sha256(tool_specs(spec))


def test_twenty_variants_of_a_seed_type_of_every_pack_differ_in_structure() -> None:
    """One seed type per pack, company types in turn (all 100 seed types: 20 CPU s, measured outside the
    suite; see docs/decisions.md)."""
    ts = load_templates()
    types = ts.catalog.company_types
    for i, domain in enumerate(ts.catalog.domains):
        seed_type = f"{domain}.{types[i % len(types)]}"
        pairs = {_pair(f"{seed_type}--v{v:03d}", ts) for v in range(1, 21)}
        assert len(pairs) >= 18, (seed_type, len(pairs))


def test_v001_is_the_full_world_and_later_variants_record_their_structure() -> None:
    ts = load_templates()
    first = expand_seed("insurance-claims.regional--v001", ts)
    assert first.omitted_tools == [] and first.task_mix == {}
    later = [expand_seed(f"insurance-claims.startup--v{v:03d}", ts) for v in range(2, 21)]
    assert any(b.omitted_tools for b in later)
    startup = expand_seed("insurance-claims.startup--v001", ts)
    assert "approvals" not in startup.modules  # a startup does not add approvals itself
    assert any("approvals" in b.modules for b in later)  # some of its variants do
    assert {f for b in later for f in b.task_mix.values()} > {1.0}
    again = expand_seed("insurance-claims.startup--v007", ts)
    assert again == later[5]  # drawn from the seed, not from the order variants are asked for


def test_a_variant_without_an_update_tool_builds_and_no_task_calls_it(tmp_path: Path) -> None:
    ts = load_templates(small_templates_at(tmp_path / "templates"))
    wid = next(f"help-desk.small--v{v:03d}" for v in range(2, 40)
               if "update_request" in expand_seed(f"help-desk.small--v{v:03d}", ts).omitted_tools)
    build_world(wid, tmp_path / "out", ts)
    world = World.open(tmp_path / "out" / "worlds" / wid)
    names = {t["name"] for t in json.loads((world.path / "tools.json").read_text())}
    assert "update_request" not in names and "grant_credit" in names
    assert not [t.task_id for t in world.tasks.values() for c in t.oracle if c.tool not in names | {ASK_TOOL}]
    assert world.manifest["coverage"] >= 0.95
    assert world.manifest["tool_set_sha256"] != _pair("help-desk.small--v001", ts)[1]


def test_a_spec_is_its_own_and_changing_it_leaves_the_cached_templates_alone() -> None:
    """build_spec hands out tables a caller may change (tests poison them; the template set is cached per
    process): a change to one spec shows in no later spec of the same templates."""
    ts = load_templates()
    first = build_spec(expand_seed("insurance-claims.regional--v001", ts), ts)
    for t in first.tables:
        t.singular = "poisoned"
        for c in t.columns:
            c.label = "poisoned"
    again = build_spec(expand_seed("insurance-claims.regional--v001", ts), ts)
    assert not [t.name for t in again.tables
                if t.singular == "poisoned" or any(c.label == "poisoned" for c in t.columns)]

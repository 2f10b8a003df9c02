"""Every seed type of the catalog builds (issue: one hundred seed types). Run by `make test-packs`, not
by `make test`: a full build of one world per pack (every company type in turn), and the first three
stages (brief, schema, seed data with its invariants) of v001 of every seed type.

Each full build must reach the floors a world is for: 20 tables, 2,000 rows, 37 tools, 100 tasks in
the six base families (discover and handbook beside them where the pack allows, and the hard tier's ask
and inbox), a task of 1,000 calls or more, every task's oracle passing and doing nothing failing,
every mutant caught, at least 95% of the write tools used by some task, and at least 30% of the tasks
naming their main record by what a person knows of it (the agent must search), and no instruction,
handbook section or requester fact with a shape the instruction reader marks (tests/test_instructions.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_instructions import _quoted_out, texts, wording
from worldfactory.runtime.world import World
from worldfactory.seeds import seed_types
from worldfactory.stages import STAGES
from worldfactory.stages.core import BuildContext, WorkDir, inputs_fingerprint, run_make, run_prove
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

TEMPLATES = load_templates()
DOMAINS = TEMPLATES.catalog.domains
TYPES = TEMPLATES.catalog.company_types
SIX = {"lookup_act", "conditional", "bulk", "workflow", "retrieval", "decline"}  # and the hard tier's where it fits
EARLY = [s for s in STAGES if s.name in ("world_brief", "world_schema", "seed_database")]


def test_the_catalog_has_a_hundred_seed_types() -> None:
    assert len(DOMAINS) >= 25 and len(seed_types(TEMPLATES)) >= 100


@pytest.mark.parametrize("domain", DOMAINS)
def test_one_world_of_every_pack_builds_to_the_floors(tmp_path: Path, domain: str) -> None:
    company_type = TYPES[DOMAINS.index(domain) % len(TYPES)]  # every company type in turn
    wid = f"{domain}.{company_type}--v001"
    build_world(wid, tmp_path, TEMPLATES)
    world = World.open(tmp_path / "worlds" / wid)
    m = world.manifest
    c, v, validity = m["counts"], m["verification"], m["verifier_validity"]
    assert c["tables"] >= 20 and c["rows"] >= 2000 and c["tools"] >= 37, c
    assert c["tasks"] >= 100 and set(m["task_families"]) >= SIX, (c, m["task_families"])
    assert max(len(t.oracle) for t in world.tasks.values()) >= 1000
    assert v["oracle_pass"] == v["tasks"] == c["tasks"] and v["null_pass"] == 0, v
    assert validity["caught_rate"] == 1.0 and validity["missed"] == 0, validity
    assert m["coverage"] >= 0.95, m["coverage_unused"]
    assert sum(t.needs_search for t in world.tasks.values()) >= 0.30 * len(world.tasks)
    said = {t.task_id: t.instruction for t in world.tasks.values()} | texts(world)  # found blind: "the why ..."
    assert {where: d for where, text in said.items() if (d := wording(_quoted_out(text)))} == {}


@pytest.mark.parametrize("seed_type", seed_types(TEMPLATES))
def test_every_seed_type_builds_its_first_stages(tmp_path: Path, seed_type: str) -> None:
    wid = f"{seed_type}--v001"
    work = tmp_path / "work"
    ctx = BuildContext(world_id=wid, templates=TEMPLATES, work=WorkDir(work, wid), data_root=tmp_path,
                       inputs=inputs_fingerprint(TEMPLATES, wid))
    try:
        for stage in EARLY:
            run_make(stage, ctx)
            proof = run_prove(stage, ctx)
            assert proof.passed, (stage.name, proof.reason)
    finally:
        shutil.rmtree(work, ignore_errors=True)

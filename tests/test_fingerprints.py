"""A world's inputs fingerprint covers exactly the template files and brief file that world reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT
from worldfactory.fingerprints import world_inputs_fingerprint, world_template_files
from worldfactory.seeds import catalog_world_ids
from worldfactory.stages.core import inputs_fingerprint
from worldfactory.templates import load_templates

INSURANCE = "insurance-claims.regional--v001"
LITIGATION = "litigation-firm.national--v001"
COMMERCE = "commerce-operations.startup--v001"


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", dest)
    return dest


def _touch(path: Path) -> None:
    path.write_text(path.read_text() + "\n# touched\n")


def _prints(root: Path, ids: list[str], briefs: Path | None = None) -> dict[str, str]:
    ts = load_templates(root)
    return {w: world_inputs_fingerprint(ts, w, briefs) for w in ids}


def test_files_are_the_domain_company_type_composed_modules_and_vocabulary() -> None:
    ts = load_templates()
    files = world_template_files(ts, INSURANCE)
    domain, ctype = ts.domains["insurance-claims"], ts.company_types["regional"]
    modules = list(domain.modules) + [m for m in domain.optional_modules if m in ctype.extra_modules]
    assert files == sorted({"domains/insurance-claims.yaml", "company_types/regional.yaml", "vocabulary.yaml",
                            *(f"modules/{m}.yaml" for m in modules)})
    assert not any(f.startswith("domains/litigation") or f in ("catalog.yaml", "registry.yaml") for f in files)
    assert inputs_fingerprint(ts, INSURANCE) == world_inputs_fingerprint(ts, INSURANCE)  # the engine uses it


def test_a_domain_pack_change_touches_only_that_domains_worlds(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    ts = load_templates(root)
    ids = catalog_world_ids(ts, variants=1)
    before = _prints(root, ids)
    _touch(root / "domains" / "insurance-claims.yaml")
    after = _prints(root, ids)
    changed = {w for w in ids if before[w] != after[w]}
    assert changed == {w for w in ids if w.startswith("insurance-claims.")}


def test_company_type_vocabulary_and_catalog_changes(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    ids = [INSURANCE, LITIGATION, COMMERCE]
    before = _prints(root, ids)
    _touch(root / "company_types" / "national.yaml")
    after = _prints(root, ids)
    assert {w for w in ids if before[w] != after[w]} == {LITIGATION}
    _touch(root / "catalog.yaml")
    _touch(root / "registry.yaml")
    assert _prints(root, ids) == after  # which worlds exist is not what is in one
    _touch(root / "vocabulary.yaml")
    assert all(v != after[w] for w, v in _prints(root, ids).items())


def test_a_shared_module_change_touches_the_worlds_that_compose_it(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    ts = load_templates(root)
    ids = catalog_world_ids(ts, variants=1)
    users = {w for w in ids if "modules/approvals.yaml" in world_template_files(ts, w)}
    assert users and users != set(ids)  # an optional module: some worlds compose it, some do not
    before = _prints(root, ids)
    _touch(root / "modules" / "approvals.yaml")
    after = _prints(root, ids)
    assert {w for w in ids if before[w] != after[w]} == users


def test_a_brief_world_follows_its_brief_file(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    briefs = tmp_path / "briefs"
    briefs.mkdir()
    brief = briefs / "harbor-mutual.yaml"
    brief.write_text("domain: insurance-claims\ncompany_type: regional\ncompany_name: Harbor Mutual\n")
    wid = "brief.harbor-mutual--v001"
    ts = load_templates(root)
    assert world_template_files(ts, wid, briefs) == world_template_files(ts, INSURANCE)
    first = _prints(root, [wid], briefs)[wid]
    _touch(root / "domains" / "litigation-firm.yaml")
    assert _prints(root, [wid], briefs)[wid] == first
    brief.write_text(brief.read_text().replace("Harbor Mutual", "Harbour Mutual"))
    assert _prints(root, [wid], briefs)[wid] != first
    brief.unlink()  # a missing brief: every template counts, and the build says what is wrong
    assert "domains/litigation-firm.yaml" in world_template_files(ts, wid, briefs)

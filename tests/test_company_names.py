"""Company names: no two worlds of the catalog share one, and a template set that would repeat them is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from worldfactory.seeds import expand_seed
from worldfactory.templates import TemplateError, load_templates


def test_every_world_of_the_catalog_has_its_own_company_name() -> None:
    ts = load_templates()
    ids = [f"{d}.{c}--v{v:03d}" for d in ts.catalog.domains for c in ts.catalog.company_types
           for v in range(1, ts.catalog.variants + 1)]
    names = [expand_seed(wid, ts).company_name for wid in ids]
    assert len(ids) >= 2000
    assert len(set(names)) == len(names)
    assert all(ts.domains[wid.split(".")[0]].trade_word in name for wid, name in zip(ids, names, strict=True))


@pytest.mark.parametrize(("folder", "named", "field", "text", "replacement"), [
    ("domains/hotel-operations.yaml", "domains/insurance-claims.yaml", "name_word", "name_word: Hospitality",
     "name_word: Insurance"),
    ("company_types/startup.yaml", "company_types/startup.yaml", "name_suffixes[1]",
     "name_suffixes: [Labs, Co, Direct]", "name_suffixes: [Labs, Mutual, Direct]"),
])
def test_a_repeated_trade_word_or_suffix_is_refused(tmp_path: Path, folder: str, named: str, field: str, text: str,
                                                    replacement: str) -> None:
    """Planted: a second pack with insurance's trade word, a startup suffix that regional companies use."""
    root = tmp_path / "templates"
    shutil.copytree(ROOT / "world_templates", root)
    path = root / folder
    assert text in path.read_text()
    path.write_text(path.read_text().replace(text, replacement))
    with pytest.raises(TemplateError) as err:
        load_templates(root)
    assert f"{root / named}: field '{field}'" in str(err.value)  # the later of the two files, in name order

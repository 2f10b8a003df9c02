"""A pack problem is named by the exact file and field it was written at: a failing invariant by the pack
file that declared it (not "the domain or a module it composes"), and a per_parent chain whose row product
is past the seed stage's bounds by `check-pack` itself, for hand-written packs (issue 35)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory.packs import check_files
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

WORLD = SMALL[0]  # help-desk.small--v001, composing org, crm, email, documents, notes, audit
CHAIN = """
  - name: steps
    singular: step
    per_parent: {table: requests, column: request_id, count: [1, 20]}
    columns:
      - {name: request_id, type: integer, ref: requests}
      - {name: note, gen: sentence}
  - name: substeps
    singular: substep
    per_parent: {table: steps, column: step_id, count: [1, 20]}
    columns:
      - {name: step_id, type: integer, ref: steps}
      - {name: note, gen: sentence}
  - name: checks
    singular: check
    per_parent: {table: substeps, column: substep_id, count: [1, %s]}
    columns:
      - {name: substep_id, type: integer, ref: substeps}
      - {name: note, gen: sentence}
"""


def test_a_failing_module_invariant_names_the_module_file_and_field(tmp_path: Path) -> None:
    root = small_templates_at(tmp_path / "t")
    crm = root / "modules" / "crm.yaml"
    crm.write_text(crm.read_text() + "invariants:\n  - name: no accounts at all\n"
                   "    sql: \"SELECT count(*) FROM accounts\"\n")
    with pytest.raises(Exception) as caught:
        build_world(WORLD, tmp_path / "data", templates=load_templates(root))
    message = str(caught.value)
    assert re.search(r"invariant 'no accounts at all' \(modules/crm.yaml: field 'invariants\[0:no accounts at all\]"
                     r"\.sql'\) fails for \d+ rows", message), message
    assert "or of a module" not in message and "help-desk.yaml" not in message
    assert not (tmp_path / "data" / "worlds" / WORLD).exists()


def test_a_failing_domain_invariant_names_the_domain_file(tmp_path: Path) -> None:
    root = small_templates_at(tmp_path / "t")
    pack = root / "domains" / "help-desk.yaml"
    old = '"SELECT count(*) FROM requests WHERE credit > fee + 0.005"'
    pack.write_text(pack.read_text().replace(old, '"SELECT count(*) FROM requests WHERE fee > 0"'))
    with pytest.raises(Exception, match=r"\(domains/help-desk.yaml: field 'invariants\[0:credits stay within the "
                                        r"request's fee\]\.sql'\) fails for \d+ rows"):
        build_world(WORLD, tmp_path / "data", templates=load_templates(root))


def test_check_pack_refuses_a_hand_written_chain_past_the_row_bounds(tmp_path: Path) -> None:
    """40 requests x 20 x 20 x 20: each level's own count is modest, the product is not."""
    root = small_templates_at(tmp_path / "t")
    pack = root / "domains" / "help-desk.yaml"
    base = pack.read_text()
    pack.write_text(base + CHAIN % 20)
    lines = check_files([pack], root)
    assert any(line.startswith(f"{pack}: field 'tables[3:checks].per_parent.count': [1, 20] gives up to ")
               and "a table has at most 25,000" in line for line in lines), lines
    assert any(line.startswith(f"{pack}: field 'tables': the tables can get up to ") and "a world has at most 60,000"
               in line for line in lines), lines
    assert not any("tables[1:steps]" in line for line in lines), lines  # 40 x 0.345 x 20: within the bound

    pack.write_text(base + CHAIN % 2)  # the same chain, two checks a substep: within both bounds
    assert check_files([pack], root) == []

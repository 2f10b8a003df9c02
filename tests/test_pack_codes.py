"""`$code` in a pack: a record a create tool or a workflow effect makes gets the next code of its own
`code` generator (REQ-0013 after REQ-0012), and a `$code` on a column without one is refused at load."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SMALL, small_templates_at
from worldfactory.packs import check_files
from worldfactory.runtime.world import World
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates


def _pack(tmp_path: Path, old: str, new: str) -> Path:
    root = small_templates_at(tmp_path / "templates")
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    assert old in text
    pack.write_text(text.replace(old, new))
    return root


def test_a_created_record_gets_the_next_code(tmp_path: Path) -> None:
    root = _pack(tmp_path, "    create: [reference, account_id, fee]\n    create_defaults: {opened_on: $today,",
                 "    create: [account_id, fee]\n    create_defaults: {reference: $code, opened_on: $today,")
    build_world(SMALL[0], tmp_path / "out", load_templates(root))
    world = World.open(tmp_path / "out" / "worlds" / SMALL[0])
    seeded = world.seed_rows("requests")  # id, then reference (the first column)
    with world.episode() as ep:
        made = ep.call("create_request", {"account_id": 1, "fee": 120.0})
        again = ep.call("create_request", {"account_id": 2, "fee": 80.0})
    assert made.ok and again.ok, (made.error, again.error)
    assert made.result and again.result
    first, second = made.result["request"]["reference"], again.result["request"]["reference"]
    assert first == f"REQ-{made.result['request']['id']:04d}" and int(second[4:]) == int(first[4:]) + 1
    assert made.result["request"]["id"] == max(seeded) + 1 and first not in {r[1] for r in seeded.values()}


def test_code_on_a_column_without_a_code_generator_is_refused(tmp_path: Path) -> None:
    root = _pack(tmp_path, "    create_defaults: {opened_on: $today,", "    create_defaults: {opened_on: $code,")
    lines = check_files([root / "domains" / "help-desk.yaml"])
    assert any("help-desk.yaml" in line and "create_defaults.opened_on" in line and "no code generator" in line
               for line in lines), lines

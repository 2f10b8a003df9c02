"""Pack text is data, never a template: names, labels and verbs with {...} and format specs in them are
shown literally in the instructions, and a rebuild gives the same bytes (issue 35, criterion 5)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import SMALL, small_templates_at
from worldfactory.fill import code_problem, fill, numbered
from worldfactory.spec import CodeGen
from worldfactory.stages.pipeline import build_world
from worldfactory.templates import load_templates

WORLD = SMALL[0]  # help-desk.small--v001
LABEL = "fee {obj.__class__.__mro__} {obj:>5000000}"  # leaked the str class's MRO and padded 5 MB before
VERB = "resolve {obj} with a {obj!r} {obj.__class__} service credit"
DEPARTMENT = "Billing {obj.__init__.__globals__} {0:>900000}"


def _payload_templates(dest: Path) -> Path:
    root = small_templates_at(dest)
    pack = root / "domains" / "help-desk.yaml"
    text = pack.read_text()
    for old, new in [
        ("{name: fee, type: money,", f"{{name: fee, label: {json.dumps(LABEL)}, type: money,"),
        ('verb: "resolve {obj} with a service credit"', f"verb: {json.dumps(VERB)}"),
        ("Billing,", f"{json.dumps(DEPARTMENT)},"),
    ]:
        assert old in text
        text = text.replace(old, new)
    pack.write_text(text)
    return root


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_braces_and_format_specs_in_pack_text_are_shown_literally(tmp_path: Path) -> None:
    ts = load_templates(_payload_templates(tmp_path / "templates"))
    a = Path(build_world(WORLD, tmp_path / "a", templates=ts).path)
    tasks = [json.loads(line) for line in (a / "tasks.jsonl").read_text().splitlines()]
    said = "\n".join(t["instruction"] for t in tasks)
    assert (a / "tasks.jsonl").stat().st_size < 500_000
    assert "<class" not in said and "__mro__}" in said
    assert f"change the {LABEL} of " in said  # the update family names the column by its label
    assert "with a {obj!r} {obj.__class__} service credit" in said  # the pack's verb, {obj} alone filled in
    b = Path(build_world(WORLD, tmp_path / "b", templates=ts).path)
    assert _digests(a) == _digests(b)


def test_fill_reads_only_plain_placeholders_once() -> None:
    assert fill("{verb} the {x}", verb="send {x}", x="{obj:>9}") == "send {x} the {obj:>9}"
    assert fill("{a.b} {a!r} {a:>5} {{a}} {a}", a="A") == "{a.b} {a!r} {a:>5} {A} A"


@pytest.mark.parametrize("pattern", ["CLM-{n:>50000000}", "X-{n.__class__}", "X-{n!r}", "X-{m}", "X-{n:099d}",
                                     "X-{}", "X-{n"])
def test_code_patterns_beyond_plain_numbers_are_refused(pattern: str) -> None:
    assert code_problem(pattern)
    with pytest.raises(ValueError, match="code"):
        CodeGen(code=pattern)


@pytest.mark.parametrize("pattern", ["CLM-{n:06d}", "{n}", "R{n:4d}-{n:02d}", "PLAIN"])
def test_plain_code_patterns_number_as_str_format_did(pattern: str) -> None:
    assert code_problem(pattern) is None
    for n in (1, 42, 123456):
        assert numbered(pattern, n) == pattern.format(n=n)

"""A property-based fuzzer over every tool's input schema of the example worlds (hypothesis).

Each tool gets a few calls, schema-valid ones and ones made bad on purpose (wrong types, missing
required keys, unknown keys, huge strings, non-finite numbers, out-of-range integers, impossible
dates, deep nesting), in process and through the in-memory MCP server. Nothing may raise out of
the runtime; a bad call is refused with a message of bounded length that quotes at most a short
prefix of a huge value; a refused call leaves the episode's state as it was; the two paths agree.
Derandomized, so CI sees the same calls every run. bench/fuzz_bench.py runs a larger fuzz.
"""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES
from tests.fuzzing import fuzz_world
from worldfactory.runtime.world import World

EXAMPLES_PER_TOOL = 4


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # a failing call's 400 kB repr
@pytest.mark.parametrize("wid", EXAMPLES)  # one test per world: xdist spreads the three over its workers
def test_fuzz_every_tool_in_process_and_over_mcp(wid: str, worlds: dict[str, World],
                                                 record_property: pytest.RecordProperty,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    local, remote, found = fuzz_world(worlds[wid], EXAMPLES_PER_TOOL)
    assert found == []
    for where, counts in (("in process", local), ("over MCP", remote)):
        record_property(f"{wid} {where}", counts.line())
        with capsys.disabled():
            print(f"\nfuzz {wid} {where}: {counts.line()}")
        assert counts.crashes == 0 and counts.refused_changed_state == 0
        # every kind of bad input was tried, and most tools got a call the schema accepts
        kinds = {"wrong_type", "missing_required", "unknown_key", "huge_string", "out_of_range", "bad_date",
                 "deep_nesting", "valid"}
        if where == "in process":
            kinds.add("non_finite")
        else:  # the in-memory client cannot carry inf or nan: those calls were made in process only
            assert counts.not_sent == local.by_kind["non_finite"][0]
        assert kinds <= set(counts.by_kind), counts.by_kind
        assert counts.accepted > 0 and counts.refused > counts.accepted

"""A larger property-based fuzz of every tool of the example worlds, in process and over in-memory MCP.

The same strategies and checks as tests/test_fuzz_tools.py (tests/fuzzing.py), with more calls per
tool (200 by default) and every problem collected instead of stopping at the first. Prints, per world
and path: calls, refusals, acceptances, crashes (must be 0) and refused calls that changed the
episode's state (must be 0), then any problems found; exits 1 if there were any.

Usage: python bench/fuzz_bench.py [--examples N] [DATA_ROOT]   (DATA_ROOT/worlds/<id>; else built
into a temp folder first, about 20 s)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fuzzing

from tests.fuzzing import fuzz_world  # noqa: E402
from worldfactory.runtime.world import World  # noqa: E402
from worldfactory.stages.pipeline import build_world  # noqa: E402
from worldfactory.templates import load_templates  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_root", nargs="?")
    parser.add_argument("--examples", type=int, default=200, help="hypothesis examples per tool")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # hypothesis warns about the repr of huge drawn values
    examples = load_templates().catalog.examples
    root = Path(args.data_root) if args.data_root else Path(tempfile.mkdtemp(prefix="fuzz-bench-"))
    if not args.data_root:
        for wid in examples:
            build_world(wid, root)
    problems: list[str] = []
    print(f"{'world':38} {'path':10} {'tools':>5} {'calls':>7} {'refused':>7} {'accepted':>8} {'crashes':>7} "
          f"{'refused+changed':>15} {'not sent':>8} {'seconds':>7}")
    for wid in examples:
        world = World.open(root / "worlds" / wid)
        started = time.perf_counter()
        local, remote, found = fuzz_world(world, args.examples, strict=False)
        seconds = time.perf_counter() - started
        problems += [f"{wid}: {p}" for p in found]
        for where, c in (("in process", local), ("MCP", remote)):
            print(f"{wid:38} {where:10} {len(world.tool_manifest):5} {c.calls:7} {c.refused:7} {c.accepted:8} "
                  f"{c.crashes:7} {c.refused_changed_state:15} {c.not_sent:8} {seconds:7.1f}", flush=True)
        for where, c in (("in process", local), ("MCP", remote)):
            kinds = ", ".join(f"{k} {n}/{r}" for k, (n, r) in sorted(c.by_kind.items()))
            print(f"  {where} per kind (calls/refused): {kinds}")
    print(f"{len(problems)} problems")
    for p in problems[:50]:
        print(f"  {p[:300]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

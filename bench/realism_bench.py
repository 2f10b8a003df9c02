"""Realism audit over one world per domain pack: violations per 1,000 checked rows, with the seed generator
fitting rows to the packs' constraints (as built) and without (rows as drawn: the "before"), and the seed
stage's CPU time for one world (process CPU, so a loaded machine does not skew it).

Usage: python bench/realism_bench.py [--type regional] [--cpu-world insurance-claims.regional--v001] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from worldfactory.audit import RULES, audit_image
from worldfactory.briefs import expand_world
from worldfactory.generate.data import build_seed_db, check_seed
from worldfactory.generate.schema import build_spec
from worldfactory.templates import load_templates


def _cpu_ms(fn: object, repeat: int) -> float:
    """The least process CPU time of `repeat` calls, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()  # type: ignore[operator]
        best = min(best, time.process_time() - start)
    return round(1000 * best, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--type", default="regional", help="company type of the one world per pack")
    ap.add_argument("--cpu-world", default="insurance-claims.regional--v001")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ts = load_templates()
    totals = {fit: Counter[str]() for fit in (False, True)}
    rows = {False: 0, True: 0}
    per_pack = []
    for domain in sorted(ts.domains):
        world_id = f"{domain}.{args.type}--v001"
        spec = build_spec(expand_world(world_id, ts), ts)
        line = {"world": world_id, "constraints": sum(len(t.constraints) for t in spec.tables)}
        for fit in (False, True):
            report = audit_image(spec, build_seed_db(spec, ts.vocabulary, fit=fit))
            totals[fit].update(v.rule for v in report.violations)
            rows[fit] += report.checked_rows
            line["after" if fit else "before"] = len(report.violations)
        line["checked_rows"] = report.checked_rows
        per_pack.append(line)
    summary = {("after" if fit else "before"): {
        "violations": sum(totals[fit].values()), "checked_rows": rows[fit],
        "per_1000_rows": round(1000 * sum(totals[fit].values()) / max(1, rows[fit]), 2),
        "by_rule": {r: totals[fit].get(r, 0) for r in RULES}} for fit in (False, True)}

    spec = build_spec(expand_world(args.cpu_world, ts), ts)
    image = build_seed_db(spec, ts.vocabulary)
    cpu = {"world": args.cpu_world,
           "seed_make_ms_fitted": _cpu_ms(lambda: build_seed_db(spec, ts.vocabulary), args.repeat),
           "seed_make_ms_as_drawn": _cpu_ms(lambda: build_seed_db(spec, ts.vocabulary, fit=False), args.repeat),
           "seed_prove_ms": _cpu_ms(lambda: check_seed(spec, image), args.repeat),
           "audit_ms": _cpu_ms(lambda: audit_image(spec, image), args.repeat)}
    print(json.dumps({"per_pack": per_pack, "summary": summary, "cpu": cpu}, indent=1))


if __name__ == "__main__":
    main()

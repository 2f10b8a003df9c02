"""`worldfactory audit WORLD|--all`: the realism audit of built worlds' seed data (worldfactory/audit.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from worldfactory.audit import RULES, AuditReport, audit_bundle, audit_oracle_ends
from worldfactory.data_root import data_root, resolve_world
from worldfactory.runtime.world import WorldError

SHOWN = 20  # violations listed per world in text output


def _bundles(args: argparse.Namespace) -> list[Path]:
    root = data_root(args.data)
    if args.all:
        worlds = root / "worlds"
        found = sorted(p for p in worlds.iterdir() if (p / "seed.db").is_file()) if worlds.is_dir() else []
        if not found:
            raise WorldError(f"no built worlds under {worlds}; build some with `worldfactory build --examples`")
        return found
    if not args.worlds:
        raise WorldError("name at least one world (ID or bundle folder), or pass --all")
    return [resolve_world(w, root) for w in args.worlds]


def cmd_audit(args: argparse.Namespace) -> int:
    audit = audit_oracle_ends if args.oracles else audit_bundle
    reports: list[AuditReport] = [audit(b) for b in _bundles(args)]
    if args.json:
        print(json.dumps([{**r.model_dump(), "by_rule": r.by_rule(), "per_1000_rows": r.per_thousand()}
                          for r in reports], indent=1, sort_keys=True))
    else:
        for r in reports:
            rules = ", ".join(f"{k} {v}" for k, v in r.by_rule().items())
            print(f"{r.world_id}: {len(r.violations)} violations in {r.checked_rows} checked rows "
                  f"({r.per_thousand()} per 1,000; {rules})")
            for v in r.violations[:SHOWN]:
                print(f"  {v.rule}\t{v.table} row {v.row}\t{v.detail}")
            if len(r.violations) > SHOWN:
                print(f"  ... {len(r.violations) - SHOWN} more (--json lists all)")
        rows = sum(r.checked_rows for r in reports)
        total = {k: sum(r.by_rule()[k] for r in reports) for k in RULES}
        per = {k: round(1000 * v / rows, 2) if rows else 0.0 for k, v in total.items()}
        print(f"all {len(reports)} worlds: {sum(total.values())} violations in {rows} checked rows; "
              f"per 1,000 rows by rule: {per}")
    return 1 if any(r.violations for r in reports) else 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    a = sub.add_parser("audit", help="realism audit of worlds' seed data: dates against the clock and the "
                                     "order of records, the tables' constraints, the pack's invariants "
                                     "(exit 1 when a rule is broken)")
    a.add_argument("worlds", nargs="*", metavar="WORLD", help="world IDs or bundle folders")
    a.add_argument("--all", action="store_true", help="every built world under DATA/worlds")
    a.add_argument("--data", help="data root (default $WORLDFACTORY_DATA or data/)")
    a.add_argument("--oracles", action="store_true", help="audit the end state of every task's oracle plan "
                                                          "instead of the seed (slower: one episode per task)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(fn=cmd_audit)

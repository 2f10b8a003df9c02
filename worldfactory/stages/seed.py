"""seed_database: the immutable seed every episode starts from."""

from __future__ import annotations

from worldfactory.generate.data import build_seed_db, check_seed
from worldfactory.stages.core import BuildContext, Stage


def make_seed(ctx: BuildContext) -> dict[str, int]:
    spec = ctx.spec(STAGE.name)
    image = build_seed_db(spec, ctx.vocabulary)
    ctx.work.write("seed.db", image)
    return {"bytes": len(image), "tables": len(spec.tables)}


def prove_seed(ctx: BuildContext) -> dict[str, int | float | str]:
    report = check_seed(ctx.spec(STAGE.name), ctx.work.read("seed.db", STAGE.name))
    out: dict[str, int | float | str] = {"rows": report["rows"], "invariants": report["invariants"],
                                         "audit_violations": report["audit_violations"],
                                         "audit_checked_rows": report["audit_checked_rows"]}
    out.update({f"rows.{k}": v for k, v in report["row_counts"].items()})
    return out


STAGE = Stage(
    name="seed_database",
    check="seed_integrity",
    proves=("integrity_check, foreign_key_check, CHECKs, invariants and the realism audit hold"),
    make=make_seed,
    prove=prove_seed,
    writes=("seed.db",),
    reads=("spec.json",),
    confined=("make", "prove"),  # pack SQL (derive, invariants) runs under the worker's memory limit
)

"""Pass^1 and pass^k of a run, per family, with Wilson score intervals (small samples, rates near 0 or 1)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

Z95 = 1.959963984540054


class Rate(BaseModel):
    passes: int
    n: int
    rate: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.rate:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n})" if self.n else "-"


def wilson(passes: int, n: int, z: float = Z95) -> Rate:
    """The Wilson score interval of passes/n."""
    if n == 0:
        return Rate(passes=0, n=0, rate=0.0, low=0.0, high=0.0)
    p = passes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Rate(passes=passes, n=n, rate=round(p, 4), low=round(max(0.0, centre - half), 4),
                high=round(min(1.0, centre + half), 4))


def pass_hat_k(c: int, n: int, k: int) -> float:
    """tau2-bench's pass^k of one task: the chance that k of its n episodes, drawn without replacement, all pass."""
    return math.comb(c, k) / math.comb(n, k) if n >= k else 0.0


class FamilyRates(BaseModel):
    pass1: Rate  # over episodes
    passk: Rate  # over tasks: every one of the k episodes passed
    tasks: int


def family_rates(episodes: list[dict[str, Any]]) -> dict[str, FamilyRates]:
    """Per family (and 'all'): pass^1 over episodes, pass^k over (world, task) with all k passing."""
    per_task: dict[tuple[str, str, str], list[bool]] = {}
    for e in episodes:
        per_task.setdefault((e["family"], e["world_id"], e["task_id"]), []).append(e["reward"] >= 1.0)
    out = {}
    for fam in [*sorted({f for f, _, _ in per_task}), "all"]:
        tasks = [v for (f, _, _), v in per_task.items() if fam in ("all", f)]
        eps = [x for v in tasks for x in v]
        out[fam] = FamilyRates(pass1=wilson(sum(eps), len(eps)), passk=wilson(sum(all(v) for v in tasks), len(tasks)),
                               tasks=len(tasks))
    return out


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, dict[str, FamilyRates | None]]:
    """Family -> {'a': rates, 'b': rates} (None where a run has no task of that family)."""
    ra, rb = family_rates(a), family_rates(b)
    fams = sorted(set(ra) | set(rb), key=lambda f: (f == "all", f))
    return {f: {"a": ra.get(f), "b": rb.get(f)} for f in fams}

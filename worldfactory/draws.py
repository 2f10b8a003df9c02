"""Where a world's random draws come from: its generation seed (from its ID and the generator version), one
independent stream per stage, and the range its scale is drawn from. Below the inputs, so seed expansion
(seeds.py), the structural variants (variants.py) and `check-pack` (packs.py) draw by one rule."""

from __future__ import annotations

import hashlib
import random

from worldfactory import GENERATOR_VERSION

SCALE_SPREAD = (0.9, 1.15)  # a world's scale is its company type's times a draw from this range


def generation_seed(world_id: str, version: str = GENERATOR_VERSION) -> int:
    digest = hashlib.sha256(f"{world_id}|{version}".encode()).hexdigest()
    return int(digest[:16], 16)


def stage_rng(seed: int, stage: str) -> random.Random:
    """An independent, reproducible random stream per stage (str seeds hash with sha512)."""
    return random.Random(f"{seed}:{stage}")

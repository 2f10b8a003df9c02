"""WorldFactory engine: turns a seed or brief into a verified, executable world bundle.

The engine never imports Dagster; the Dagster layer in `assets/` wraps it.
"""

GENERATOR_VERSION = "0.1.0"

__all__ = ["GENERATOR_VERSION"]

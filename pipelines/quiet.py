"""Dagster's API-stability warnings (BetaWarning, PreviewWarning, SupersessionWarning) ignored.

They tell whoever writes the code location that an API may change (`backfill_policy` is beta,
`dagster dev` is superseded by `dg dev`); the person running `worldfactory build`, `ui` or `delete`
can do nothing about them, and 27 such blocks buried the result table. pipelines/__init__.py
installs the filters before any asset, sensor or job is defined, so every process that loads the
code location (the CLI, its build workers, the code server of `worldfactory ui`) is quiet.
`python -m worldfactory_dagster.pipelines ARGS...` (pipelines/__main__.py) is the `dagster` command with the same
filters: `worldfactory ui` starts `dagster dev` through it.
"""

from __future__ import annotations

import warnings

from dagster_shared.utils.warnings import BetaWarning, PreviewWarning, SupersessionWarning

STABILITY_WARNINGS = (BetaWarning, PreviewWarning, SupersessionWarning)


def install() -> None:
    for category in STABILITY_WARNINGS:
        warnings.filterwarnings("ignore", category=category)


"""Dagster assets: one module per build stage, each a thin wrapper over worldfactory.stages.core."""

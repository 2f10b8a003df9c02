"""Dagster assets: one per build stage, made from the engine's stage registry (assets/stage.py), and the catalog."""

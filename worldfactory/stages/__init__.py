"""The stages of a world build: each declared once, in order; the engine, Dagster and the docs read this."""

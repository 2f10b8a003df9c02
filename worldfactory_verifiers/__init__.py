"""The verifiers plugin name for worldfactory.adapters.verifiers_env: verifiers loads a taskset by a
top-level module name (`--env.taskset.id worldfactory-verifiers`), so this package re-exports it."""

from worldfactory.adapters.verifiers_env import WorldTaskset, WorldVerifiersEnv

__all__ = ["WorldTaskset", "WorldVerifiersEnv"]

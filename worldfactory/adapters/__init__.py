"""Adapters from built worlds to what RL trainers use: a Hugging Face dataset of curated tasks, TRL's
GRPO reward functions, a Prime Intellect `verifiers` environment and an OpenEnv server.

Each adapter imports its heavy library lazily (the `trainers` extra: `pip install -e ".[trainers]"`),
so the base install and `import worldfactory` stay light.
"""

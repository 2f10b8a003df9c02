"""RolloutPolicy: which policy cuts the pass band, how many rollouts per task, and where a model is served."""

from __future__ import annotations

import os

import dagster as dg

from worldfactory.rollouts import RolloutConfig


class RolloutPolicy(dg.ConfigurableResource):
    """Default: the noisy oracle (synthetic, offline). `policy: openai` with base_url and model for a real one."""

    policy: str = "noisy"
    k: int = 8
    error_rate: float = 0.1
    concurrency: int = 32
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable at run time, never stored
    max_turns: int = 40
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0

    def config(self) -> RolloutConfig:
        return RolloutConfig(policy=self.policy, k=self.k, error_rate=self.error_rate, concurrency=self.concurrency,
                             base_url=self.base_url, model=self.model,
                             api_key=os.environ.get(self.api_key_env, "unused"), max_turns=self.max_turns,
                             price_in_per_mtok=self.price_in_per_mtok, price_out_per_mtok=self.price_out_per_mtok)

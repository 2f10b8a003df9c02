"""Which model drafts packs, where its replies are cached, and what its tokens cost.

Everything comes from the environment, so the command line (`build --base-url/--model/--offline`
set these for the process), Dagster runs started by it and `worldfactory ui` all agree:
OPENAI_BASE_URL, OPENAI_API_KEY, WORLDFACTORY_LLM_MODEL, WORLDFACTORY_LLM_OFFLINE=1,
WORLDFACTORY_LLM_CACHE (default <data root>/llm-cache), WORLDFACTORY_LLM_MAX_REPAIRS (default 3)
and WORLDFACTORY_LLM_PRICES (a YAML file of prices that replace or extend the table below).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from worldfactory.briefs import ENV_MODEL as ENV_MODEL  # where the CLI and the client read it
from worldfactory.briefs import model_from_env
from worldfactory.drafting.errors import DraftError

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_OFFLINE = "WORLDFACTORY_LLM_OFFLINE"
ENV_CACHE = "WORLDFACTORY_LLM_CACHE"
ENV_MAX_REPAIRS = "WORLDFACTORY_LLM_MAX_REPAIRS"
ENV_PRICES = "WORLDFACTORY_LLM_PRICES"
DEFAULT_MAX_REPAIRS = 3


class Price(BaseModel):
    """US dollars per million tokens."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


# Published list prices of a few hosted models (USD per million tokens). A model that is not listed
# costs $0: a local server (vLLM, Ollama, llama.cpp) bills nobody. WORLDFACTORY_LLM_PRICES overrides.
PRICES: dict[str, Price] = {
    "gpt-4o": Price(input_per_mtok=2.50, output_per_mtok=10.00),
    "gpt-4o-mini": Price(input_per_mtok=0.15, output_per_mtok=0.60),
    "gpt-4.1": Price(input_per_mtok=2.00, output_per_mtok=8.00),
    "gpt-4.1-mini": Price(input_per_mtok=0.40, output_per_mtok=1.60),
    "gpt-4.1-nano": Price(input_per_mtok=0.10, output_per_mtok=0.40),
}


class ConfigError(DraftError):
    """The drafting settings are incomplete or invalid; the message says which setting."""


class LLMConfig(BaseModel):
    base_url: str = ""
    api_key: str = ""
    model: str = ""
    offline: bool = False  # never call a model: cached replies only
    cache_dir: Path
    max_repairs: int = Field(default=DEFAULT_MAX_REPAIRS, ge=0, le=20)
    request_retries: int = Field(default=4, ge=0, le=10)  # the client's own retries of 429 and 5xx, with backoff
    timeout_s: float = 600.0
    prices: dict[str, Price] = Field(default_factory=lambda: dict(PRICES))

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        price = self.prices.get(self.model)
        if price is None:
            return 0.0
        return round((prompt_tokens * price.input_per_mtok + completion_tokens * price.output_per_mtok) / 1e6, 8)


def load_prices(path: Path) -> dict[str, Price]:
    """A price file: `{model: {input_per_mtok: x, output_per_mtok: y}}`; errors name the file and the model."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the price table ({ENV_PRICES}): {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of model name to prices")
    out: dict[str, Price] = {}
    for model, value in data.items():
        try:
            out[str(model)] = Price.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigError(f"{path}: field '{model}.{'.'.join(map(str, first['loc']))}': {first['msg']}") from exc
    return out


def config_from_env(data_root: Path) -> LLMConfig:
    """The drafting settings of this process (see the module's docstring)."""
    prices = dict(PRICES)
    if os.environ.get(ENV_PRICES):
        prices.update(load_prices(Path(os.environ[ENV_PRICES])))
    raw_repairs = os.environ.get(ENV_MAX_REPAIRS, str(DEFAULT_MAX_REPAIRS))
    try:
        return LLMConfig(base_url=os.environ.get(ENV_BASE_URL, "").strip(), api_key=os.environ.get(ENV_API_KEY, ""),
                         model=model_from_env(), offline=os.environ.get(ENV_OFFLINE, "") not in ("", "0"),
                         cache_dir=Path(os.environ.get(ENV_CACHE) or data_root / "llm-cache"),
                         max_repairs=int(raw_repairs) if raw_repairs.strip().isdigit() else -1, prices=prices)
    except ValidationError as exc:
        raise ConfigError(f"{ENV_MAX_REPAIRS}={raw_repairs!r}: a whole number from 0 to 20") from exc

"""Stage asset `task_rollouts`: k rollouts per task with the RolloutPolicy resource, rows to the catalogs.

Model rollouts share the instance-wide `llm_api` concurrency pool (set its limit with
`dagster instance concurrency set llm_api N`) and retry with exponential backoff when a
server keeps answering 429 or 5xx after the client's own retries.
"""

from __future__ import annotations

import dagster as dg

from assets.stage import stage_asset
from assets.verifiers import verifiers_asset

LLM_RETRY = dg.RetryPolicy(max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)

rollouts_asset = stage_asset("task_rollouts", [verifiers_asset], pool="llm_api", retry_policy=LLM_RETRY)

"""The detail page's plan figures, formatted for reading like the catalog's (from rows' version-1
plan JSON)."""

from __future__ import annotations

import pytest

from deployments.handoff.snapshot import PlanSnapshot
from deployments.lifecycle.selectors import plan_figures


@pytest.mark.parametrize(
    ("plan", "tokens", "concurrency"),
    [
        ({"kv_cache_tokens": 305855280, "max_concurrency": 597373.6}, "305,855,280", "597,374"),
        ({"kv_cache_tokens": 4096, "max_concurrency": 2.5}, "4,096", "2.5"),
        ({"kv_cache_tokens": 900, "max_concurrency": 99.99}, "900", "99.99"),
        ({}, "?", "?"),
    ],
)
def test_plan_figures(plan: dict, tokens: str, concurrency: str) -> None:
    assert plan_figures(PlanSnapshot.from_json(plan)) == {
        "kv_cache_tokens": tokens,
        "max_concurrency": concurrency,
    }

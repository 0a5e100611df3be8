"""One replica's figures from its engine's own /metrics (vLLM 0.33 names, see
../shared/reference/apis.md §1.3), parsed with prometheus_client's text parser."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from controlpanel import enginehttp

TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
GAUGES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv_usage",
}
SCRAPE_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    ttft: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    tpot: dict[float, float] = field(default_factory=dict)


def parse(text: str) -> ReplicaMetrics:
    """Summed over the engines of one server (labels model_name, engine); a histogram's
    buckets by upper bound."""
    values = {"waiting": 0.0, "running": 0.0, "kv_usage": 0.0}
    histograms: dict[str, dict[float, float]] = {TTFT: {}, TPOT: {}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in GAUGES:
                values[GAUGES[sample.name]] += sample.value
            elif sample.name.endswith("_bucket") and sample.name[:-7] in histograms:
                bound = float(sample.labels["le"])
                target = histograms[sample.name[:-7]]
                target[bound] = target.get(bound, 0.0) + sample.value
    return ReplicaMetrics(**values, ttft=histograms[TTFT], tpot=histograms[TPOT])


def scrape(base_url: str) -> ReplicaMetrics | None:
    """None when the engine does not answer (it is starting, or gone): no figures, not zero."""
    try:
        response = enginehttp.client().get(f"{base_url}/metrics", timeout=SCRAPE_TIMEOUT_S)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    return parse(response.text)


def finite(buckets: dict[float, float]) -> dict[str, float]:
    """JSON keys for a bucket map ("+Inf" for the last)."""
    return {("+Inf" if math.isinf(b) else repr(b)): c for b, c in buckets.items()}

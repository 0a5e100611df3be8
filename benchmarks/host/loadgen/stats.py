"""One level's figures from its requests, with `vllm bench serve`'s definitions. Pure.

Per request (times from the request's send, on the client's monotonic clock):
  TTFT = first streamed chunk that carries a choice; ITL = the gaps between later chunks;
  E2EL = the last chunk; TPOT = (E2EL - TTFT) / (output tokens - 1), for > 1 output token.
Per level: completed = requests that received a chunk; throughputs divide by the level's wall
time (first send to last answer); ITL percentiles pool every gap of every completed request;
percentiles interpolate linearly (numpy's default), as `vllm bench serve` does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 95, 99)
SAMPLES_KEPT = 2000  # per level and metric, for the distribution charts


@dataclass(slots=True)
class RequestResult:
    ok: bool = False
    started_s: float = 0.0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    latency_s: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int | None = None
    error: str = ""
    engine_gone: bool = False  # the connection was refused: nothing listens on the port

    @property
    def tpot_s(self) -> float | None:
        if not self.ok or self.ttft_s is None or self.output_tokens <= 1:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between the closest ranks (numpy.percentile's default)."""
    if not sorted_values:
        raise ValueError("percentile of nothing")
    rank = (len(sorted_values) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def distribution_ms(values_s: Iterable[float]) -> dict[str, float] | None:
    """mean, std, median and p50/p90/p95/p99 in ms, or None when there is nothing."""
    values = sorted(v * 1000 for v in values_s)
    if not values:
        return None
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    figures = {"mean": mean, "std": std, "median": percentile(values, 50)}
    figures.update({f"p{p}": percentile(values, p) for p in PERCENTILES})
    return {k: round(v, 3) for k, v in figures.items()}


def kept(values: Sequence[float], limit: int = SAMPLES_KEPT) -> list[float]:
    """At most `limit` values in ms, evenly strided: what the distribution charts draw."""
    stride = max(1, math.ceil(len(values) / limit))
    return [round(v * 1000, 3) for v in values[::stride]]


def summarize(results: Sequence[RequestResult], duration_s: float) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    output_tokens = sum(r.output_tokens for r in done)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in done)
    itls = [gap for r in done for gap in r.itl_s]
    ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
    per_s = 1 / duration_s if duration_s > 0 else 0.0
    return {
        "requests": len(results),
        "completed": len(done),
        "failed": len(failed),
        "errors": error_counts(failed),
        "duration_s": round(duration_s, 3),
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "request_throughput": round(len(done) * per_s, 4),
        "output_throughput": round(output_tokens * per_s, 3),
        "total_token_throughput": round((output_tokens + prompt_tokens) * per_s, 3),
        "ttft_ms": distribution_ms(ttfts),
        "tpot_ms": distribution_ms(t for r in done if (t := r.tpot_s) is not None),
        "itl_ms": distribution_ms(itls),
        "e2el_ms": distribution_ms(r.latency_s for r in done),
        "samples": {"ttft_ms": kept(ttfts), "itl_ms": kept(itls)},
    }


def error_counts(failed: Iterable[RequestResult], top: int = 5) -> list[dict[str, Any]]:
    counts = Counter(r.error or "unknown error" for r in failed)
    return [{"error": text, "count": n} for text, n in counts.most_common(top)]


def meets_sla(figures: dict[str, Any], ttft_p95_ms: float | None, itl_p95_ms: float | None) -> bool:
    """Every request answered, and each p95 the SLA names at or under its bound."""
    if figures["failed"] or not figures["completed"]:
        return False
    for key, bound in (("ttft_ms", ttft_p95_ms), ("itl_ms", itl_p95_ms)):
        if bound is not None and (figures[key] is None or figures[key]["p95"] > bound):
            return False
    return True

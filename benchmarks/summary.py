"""What a run's stored levels add up to: the highest sustained concurrency, the plan against it,
and the chart payloads (distributions as histograms: the project's Plotly bundle has no
histogram trace). Pure: the run's JSON in, dicts out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

HISTOGRAM_BINS = 30
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")


def level_sustained(level: dict[str, Any], workload: dict[str, Any]) -> bool:
    """Every request answered, the level not cut short, and the SLA (if any) met."""
    if level.get("failed") or not level.get("completed") or level.get("stopped"):
        return False
    for key, bound in (
        ("ttft_ms", workload.get("sla_ttft_p95_ms")),
        ("itl_ms", workload.get("sla_itl_p95_ms")),
    ):
        figures = level.get(key)
        if bound is not None and (figures is None or figures["p95"] > bound):
            return False
    return True


def highest_sustained(levels: Sequence[dict[str, Any]], workload: dict[str, Any]) -> float | None:
    """The highest load (concurrency or rate) of an unbroken series of sustained levels from
    the lowest."""
    best = None
    for level in sorted(levels, key=lambda lv: lv["load"]):
        if not level_sustained(level, workload):
            break
        best = level["load"]
    return best


def mean_tokens(levels: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """Mean prompt and output tokens per answered request, as the engine counted them."""
    done = sum(lv.get("completed", 0) for lv in levels)
    if not done:
        return None
    prompt = sum(lv.get("prompt_tokens", 0) for lv in levels) / done
    return prompt, sum(lv.get("output_tokens", 0) for lv in levels) / done


def plan_vs_measured(
    layout: dict[str, Any], levels: Sequence[dict[str, Any]], workload: dict[str, Any]
) -> dict[str, Any]:
    """The plan's KV-cache concurrency (at max_model_len, and at this run's request size) next
    to the highest concurrency the run sustained."""
    tokens = mean_tokens(levels)
    kv_tokens = layout.get("plan_kv_cache_tokens")
    at_workload = None
    if tokens is not None and kv_tokens:
        at_workload = round(float(kv_tokens) / max(1.0, tokens[0] + tokens[1]), 1)
    sustained = highest_sustained(levels, workload)
    tested = max((lv["load"] for lv in levels), default=None)
    rate = None
    if workload.get("mode") == "rate":  # the concurrency it took: the most in flight then
        rate = sustained
        at = [lv for lv in levels if lv["load"] == sustained]
        sustained = at[0].get("peak_in_flight") if at else None
        tested = None
    return {
        "plan_max_concurrency": layout.get("plan_max_concurrency"),
        "plan_at_workload": at_workload,
        "request_tokens": None if tokens is None else round(tokens[0] + tokens[1], 1),
        "sustained": sustained,
        "sustained_rate": rate,
        "highest_tested": tested,
        "note": (
            f"Sustained {rate:g} req/s, with at most {sustained} requests in flight."
            if rate is not None
            else _note(sustained, tested, at_workload)
        ),
    }


def _note(sustained: float | None, tested: float | None, at_workload: float | None) -> str:
    if sustained is None:
        return "No level was sustained (every request answered, the SLA met)."
    if at_workload is not None and sustained < min(tested or 0, at_workload):
        return (
            f"Sustained {sustained} concurrent requests, below what the KV cache holds at this "
            f"request size ({at_workload:g}): something other than KV-cache room limits it."
        )
    if tested is not None and sustained == tested:
        return f"Every level up to {tested} was sustained: the limit lies above the tested load."
    return f"Sustained up to {sustained} concurrent requests."


def histogram(values_ms: Sequence[float], bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """Bin centres and counts over [min, max] (empty lists for no values)."""
    if not values_ms:
        return {"x": [], "y": [], "width": []}
    low, high = min(values_ms), max(values_ms)
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for v in values_ms:
        counts[min(bins - 1, math.floor((v - low) / width))] += 1
    centres = [round(low + width * (i + 0.5), 3) for i in range(bins)]
    return {"x": centres, "y": [float(c) for c in counts], "width": [width] * bins}


def chart_levels(levels: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-level series for the throughput and latency charts, and the distributions."""
    ordered = sorted(levels, key=lambda lv: lv["load"])
    latency: dict[str, dict[str, list[float | None]]] = {}
    for key in LATENCY_KEYS:
        latency[key] = {
            p: [(lv.get(key) or {}).get(p) for lv in ordered] for p in ("p50", "p95", "p99", "mean")
        }
    return {
        "load": [lv["load"] for lv in ordered],
        "output_throughput": [lv["output_throughput"] for lv in ordered],
        "request_throughput": [lv["request_throughput"] for lv in ordered],
        "failed": [lv["failed"] for lv in ordered],
        "latency": latency,
        "ttft_hist": [histogram(lv.get("samples", {}).get("ttft_ms", [])) for lv in ordered],
        "itl_hist": [histogram(lv.get("samples", {}).get("itl_ms", [])) for lv in ordered],
    }

"""The stored levels plus their GPU figures and bottleneck readings (bottleneck.py's rules).

The GPU figures come from the samples the monitoring already keeps in Redis, read through
monitoring.selectors; the rest from the level's own figures.
"""

from __future__ import annotations

from typing import Any

from benchmarks import gpu_series
from benchmarks.bottleneck import LevelEvidence, read_level
from monitoring.gpus.base import HostSample
from monitoring.selectors import samples_between


def add_readings(
    levels: list[dict[str, Any]], layout: dict[str, Any], workload: dict[str, Any]
) -> list[dict[str, Any]]:
    indices = layout.get("gpu_indices", [])
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for level in levels:
        samples = level_samples(layout.get("host", ""), level)
        gpu = gpu_series.level_figures(samples, indices)
        evidence = level_evidence(level, gpu, layout, previous)
        out.append({**level, "gpu": gpu, "reading": read_level(evidence).to_dict()})
        previous = level
    return out


def level_samples(host: str, level: dict[str, Any]) -> list[HostSample]:
    """The samples taken during the level, none for a level shorter than the sampling interval:
    a sample after it shows the next level's load already (or the idle one after the run)."""
    return samples_between(host, level["started_ms"], level["ended_ms"])


def level_evidence(
    level: dict[str, Any],
    gpu: dict[str, Any],
    layout: dict[str, Any],
    previous: dict[str, Any] | None,
) -> LevelEvidence:
    engine = level.get("engine") or {}
    return LevelEvidence(
        load=level["load"],
        load_label="request rate" if level.get("rate") is not None else "concurrency",
        gpu_count=len(layout.get("gpu_indices", [])) or 1,
        output_throughput=level["output_throughput"],
        requests=level["requests"],
        failed=level["failed"],
        gpu_util_pct=gpu.get("util_pct"),
        gpu_memory_pct=gpu.get("memory_pct"),
        host_cpu_pct=level.get("host_cpu_pct"),
        client_cpu_pct=level.get("client_cpu_pct"),
        kv_usage=engine.get("kv_usage_max"),
        waiting=engine.get("waiting_mean"),
        preemptions=engine.get("preemptions"),
        previous_load=None if previous is None else previous["load"],
        previous_throughput=None if previous is None else previous["output_throughput"],
        simulated=bool(layout.get("simulated")),
    )

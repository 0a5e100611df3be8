"""The deployment's GPUs over a run, from the monitoring samples: figures per level (for the
reading) and series per GPU (for the charts). Pure: samples in, dicts out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from monitoring.gpus.base import GpuSample, HostSample

GIB = 1024**3


def _ours(samples: Iterable[HostSample], indices: Sequence[int]) -> list[list[GpuSample]]:
    wanted = set(indices)
    return [[g for g in s.gpus if g.index in wanted and not g.lost] for s in samples]


def level_figures(samples: Sequence[HostSample], indices: Sequence[int]) -> dict[str, Any]:
    """Mean utilization, max memory used (% of total) and mean power over the samples."""
    rows = [g for gpus in _ours(samples, indices) for g in gpus]
    util = [g.gpu_util_pct for g in rows if g.gpu_util_pct is not None]
    memory = [
        100 * g.memory_used_bytes / g.memory_total_bytes
        for g in rows
        if g.memory_used_bytes is not None and g.memory_total_bytes
    ]
    power = [g.power_mw / 1000 for g in rows if g.power_mw is not None]
    return {
        "samples": len(samples),
        "util_pct": round(sum(util) / len(util), 1) if util else None,
        "memory_pct": round(max(memory), 1) if memory else None,
        "power_w": round(sum(power) / len(power), 1) if power else None,
    }


def series(samples: Sequence[HostSample], indices: Sequence[int]) -> dict[str, Any]:
    """``{"t": [ms], "gpus": {"<i>": {"util": [...], "memory_gib": [...], "power_w": [...]}}}``."""
    out: dict[str, Any] = {"t": [s.ts_ms for s in samples], "gpus": {}}
    for i in indices:
        out["gpus"][str(i)] = {"util": [], "memory_gib": [], "power_w": []}
    for sample in samples:
        by_index = {g.index: g for g in sample.gpus}
        for i in indices:
            g = by_index.get(i)
            values = out["gpus"][str(i)]
            values["util"].append(None if g is None else g.gpu_util_pct)
            used = None if g is None else g.memory_used_bytes
            values["memory_gib"].append(None if used is None else round(used / GIB, 3))
            power = None if g is None else g.power_mw
            values["power_w"].append(None if power is None else round(power / 1000, 1))
    return out

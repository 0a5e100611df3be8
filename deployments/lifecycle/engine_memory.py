"""What llama-server says it allocated on each leased GPU, beside the plan, for the detail page.

Read from the engine's own `-lv 4` start-up lines (`engines.llamacpp_memory`) as the host ships
them to Redis (`live.enginelog`): the web never opens a host's file. The stream keeps the last
STREAM_MAX_LINES lines, so a long-running engine's start-up lines may have gone; the note says
so. NVML's figure per process (`planned_vs_measured`) stays the measured column; this one is
the engine's breakdown (weights, KV, compute), which NVML cannot give.
"""

from __future__ import annotations

from typing import Any

import redis

from deployments.engines.llamacpp_memory import (
    DeviceBuffers,
    MeasuredRow,
    compare,
    read_buffers,
    visible_order,
)
from deployments.lifecycle.planned_vs_measured import MEASURED_STATUSES, gib, signed_gib
from deployments.live import enginelog
from deployments.models import Deployment, Engine, GpuLease


def engine_memory_table(d: Deployment) -> dict[str, Any] | None:
    """`{"rows": [...], "host": {...} | None, "note": str}`; None for engines other than
    llama-server or a deployment not running."""
    if d.engine != Engine.LLAMACPP or d.status not in MEASURED_STATUSES:
        return None
    leases = GpuLease.objects.filter(deployment=d, active=True).select_related("gpu")
    leased = [lease.gpu.index for lease in leases]
    plan = d.snapshot
    planned = {
        slot.index: (figures.weights_bytes, figures.kv_cache_bytes, figures.total_bytes)
        for slot, figures in zip(plan.gpus[0] if plan.gpus else (), plan.per_gpu, strict=False)
    }
    try:
        lines = enginelog.recent(d.pk, enginelog.STREAM_MAX_LINES)
    except redis.RedisError:
        return {"rows": [], "host": None, "note": "The engine's log cannot be read (Redis)."}
    buffers = read_buffers("\n".join(text for _, text in lines))
    order = visible_order(plan.gpu_indices, leased)
    rows = compare(planned, buffers, order)
    host = next((b for b in buffers if b.gpu_ordinal is None), None)
    note = "" if buffers else "The engine's buffer lines are not in its recent log."
    return {"rows": [_row(r) for r in rows], "host": _host(host), "note": note}


def _row(r: MeasuredRow) -> dict[str, Any]:
    m = r.measured
    return {
        "gpu": r.gpu,
        "planned": gib(r.planned_total_bytes),
        "weights": gib(m.model_bytes if m else None),
        "kv": gib(m.kv_bytes if m else None),
        "compute": gib(m.compute_bytes if m else None),
        "measured": gib(m.total_bytes if m else None),
        "difference": signed_gib(r.difference_bytes),
    }


def _host(b: DeviceBuffers | None) -> dict[str, str] | None:
    if b is None:
        return None
    return {"weights": gib(b.model_bytes), "kv": gib(b.kv_bytes), "total": gib(b.total_bytes)}

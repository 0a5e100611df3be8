"""Planned vs measured memory per leased GPU, from the host's latest sample in monitoring.

Measured = the memory of the GPU processes monitoring attributes to this deployment (its
engine's process group, mapped by the host worker into the owners hash), or the engine's own
pid. Read-only use of monitoring's selectors; a Redis outage becomes a note, not an error.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis
from django.conf import settings

from deployments.models import Deployment, GpuLease, Status
from deployments.planning.units import GIB
from monitoring import selectors
from monitoring.gpus.base import HostSample

MEASURED_STATUSES = frozenset({Status.STARTING, Status.RUNNING, Status.STOPPING})


@dataclass(frozen=True, slots=True)
class GpuMemoryRow:
    gpu: int
    planned_bytes: int
    measured_bytes: int | None  # None: no sample of this GPU, or no engine process on it yet
    processes: int

    @property
    def difference_bytes(self) -> int | None:
        return None if self.measured_bytes is None else self.measured_bytes - self.planned_bytes


def gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GIB:,.2f} GiB"


def signed_gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GIB:+,.2f} GiB"


def memory_rows(
    planned: Sequence[tuple[int, int]],
    sample: HostSample | None,
    owners: Mapping[str, str],
    *,
    name: str,
    pid: int | None,
) -> list[GpuMemoryRow]:
    """One row per (gpu index, planned bytes); pure, for the page and the JSON endpoint."""
    by_index = {g.index: g for g in sample.gpus} if sample else {}
    rows = []
    for index, planned_bytes in planned:
        gpu = by_index.get(index)
        mine = [
            p
            for p in (gpu.processes if gpu else ())
            if owners.get(str(p.pid)) == name or (pid is not None and p.pid == pid)
        ]
        known = [p.used_memory_bytes for p in mine if p.used_memory_bytes is not None]
        measured = sum(known) if known else None
        rows.append(GpuMemoryRow(index, planned_bytes, measured, len(mine)))
    return rows


def _latest(host: str) -> tuple[HostSample | None, dict[str, str]]:
    return selectors.latest_sample(host), selectors.stored_owners(host)


def _stale_after_s() -> float:
    return 3 * float(settings.SAMPLE_INTERVAL_S) + 5


def memory_table(d: Deployment) -> dict[str, Any]:
    """`{"rows": [...], "note": str, "sample_age_s": float | None}` for the detail page."""
    leases = GpuLease.objects.filter(deployment=d).select_related("gpu").order_by("gpu__index")
    if d.status in MEASURED_STATUSES:
        leases = leases.filter(active=True)
    planned = [(lease.gpu.index, lease.memory_bytes) for lease in leases]
    if d.status not in MEASURED_STATUSES:
        return _table(memory_rows(planned, None, {}, name=d.name, pid=None), "", None)
    try:
        sample, owners = _latest(d.host.name)
    except redis.RedisError:
        note = "Monitoring data is unavailable (Redis cannot be reached)."
        return _table(memory_rows(planned, None, {}, name=d.name, pid=None), note, None)
    age_s = None if sample is None else max(0.0, time.time() - sample.ts_ms / 1000)
    if sample is None or (age_s is not None and age_s > _stale_after_s()):
        note = f"No recent GPU sample from {d.host.name}: is its host worker running?"
        return _table(memory_rows(planned, None, {}, name=d.name, pid=None), note, age_s)
    rows = memory_rows(planned, sample, owners, name=d.name, pid=d.pid)
    note = "" if any(r.measured_bytes is not None for r in rows) else _no_process_note(d)
    return _table(rows, note, age_s)


def _no_process_note(d: Deployment) -> str:
    if d.status == Status.STARTING:
        return "The engine has not allocated GPU memory yet."
    return "No GPU process of this engine in the latest sample yet."


def _table(rows: list[GpuMemoryRow], note: str, age_s: float | None) -> dict[str, Any]:
    return {
        "rows": [
            {
                **asdict(r),
                "difference_bytes": r.difference_bytes,
                "planned": gib(r.planned_bytes),
                "measured": gib(r.measured_bytes),
                "difference": signed_gib(r.difference_bytes),
            }
            for r in rows
        ],
        "note": note,
        "sample_age_s": None if age_s is None else round(age_s, 1),
    }

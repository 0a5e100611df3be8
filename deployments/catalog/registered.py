"""The planner's inventory, read from registered hosts, their latest samples and active
reservations.

A GPU's free memory for the planner is what neither other deployments' reservations nor
anything outside Shardboard (the driver, a stray process) holds, and never more than its latest
sample shows free: a reservation whose engine has not allocated yet is counted, and so is an
engine that holds more than it reserved.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis
from django.db.models import Sum
from django.db.models.functions import Coalesce

from deployments import planning
from deployments.models import GpuLease
from monitoring import selectors as monitoring_selectors
from monitoring.models import Gpu, Host

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Measured:
    """One GPU in the latest sample: free bytes, and bytes used by no deployment's engine."""

    free_bytes: int
    outside_bytes: int


def link_label(link: dict[str, Any]) -> str:
    level = str(link.get("level", "SYS"))
    return f"NV{int(link.get('nvlink_count') or 1)}" if level == "NV" else level


def host_links(host: Host) -> dict[tuple[int, int], str]:
    return {(int(lk["a"]), int(lk["b"])): link_label(lk) for lk in host.topology or []}


def measured_by_gpu(host: Host) -> dict[int, Measured]:
    """Per GPU index, from the latest sample; empty when Redis has none."""
    try:
        sample = monitoring_selectors.latest_sample(host.name)
        owners = monitoring_selectors.stored_owners(host.name) if sample else {}
    except redis.RedisError as exc:
        log.warning("no live free-memory figures for %s: %s", host.name, exc)
        return {}
    if sample is None:
        return {}
    out = {}
    for g in sample.gpus:
        if g.memory_free_bytes is None:
            continue
        owned = sum(p.used_memory_bytes or 0 for p in g.processes if str(p.pid) in owners)
        outside = max((g.memory_used_bytes or 0) - owned, 0)
        out[g.index] = Measured(g.memory_free_bytes, outside)
    return out


def free_bytes_by_gpu(host: Host) -> dict[int, int]:
    """Free memory per GPU index from the latest sample; empty when Redis has none."""
    return {index: m.free_bytes for index, m in measured_by_gpu(host).items()}


def reserved_bytes(gpu_ids: Iterable[int]) -> dict[int, int]:
    """Bytes of the active reservations on each GPU (by primary key); a sleeping engine's
    lease counts only what it still holds (GpuLease.asleep_bytes)."""
    rows = (
        GpuLease.objects.filter(gpu_id__in=list(gpu_ids), active=True)
        .values("gpu_id")
        .annotate(total=Sum(Coalesce("asleep_bytes", "memory_bytes")))
    )
    return {int(r["gpu_id"]): int(r["total"] or 0) for r in rows}


def planner_host(host: Host, *, only_indices: set[int] | None = None) -> planning.Host:
    """The host as the planner sees it: its GPUs (``Gpu.objects.gpus()``) and its CPU row as
    ``planning.Host.cpu``, each with what is free of it now."""
    gpus = list(host.gpus.gpus().filter(present=True))
    cpu_row = host.gpus.cpus().filter(present=True).first()
    rows = [*gpus, cpu_row] if cpu_row else gpus
    reserved = reserved_bytes(g.pk for g in rows)
    measured = measured_by_gpu(host)
    free = {g.index: _free_bytes(g, reserved.get(g.pk, 0), measured.get(g.index)) for g in rows}
    planned = tuple(
        planning.Gpu(
            index=g.index,
            name=g.name,
            total_bytes=g.memory_total_bytes,
            free_bytes=free[g.index],
            busy=only_indices is not None and g.index not in only_indices,
        )
        for g in gpus
    )
    cpu = _planner_cpu(host, cpu_row, free) if cpu_row else None
    return planning.Host(host.name, planned, host_links(host), cpu=cpu)


def _free_bytes(row: Gpu, reserved: int, sample: Measured | None) -> int:
    """Total less the reservations, and less what others hold by the latest sample."""
    free = row.memory_total_bytes - reserved
    if sample is not None:
        free = min(free - sample.outside_bytes, sample.free_bytes)
    return max(free, 0)


def _planner_cpu(host: Host, row: Gpu, free: dict[int, int]) -> planning.Cpu | None:
    """The CPU row with the facts its worker registered (``Host.info["cpu"]``); None for a host
    registered before it offered them."""
    facts = (host.info or {}).get("cpu")
    if not isinstance(facts, dict) or not facts.get("cores"):
        return None
    return planning.Cpu(
        name=str(facts.get("name") or row.name),
        cores=int(facts["cores"]),
        total_bytes=row.memory_total_bytes,
        free_bytes=free[row.index],
        numa_nodes=int(facts.get("numa_nodes") or 1),
        isa=tuple(str(f) for f in facts.get("isa") or ()),
        arch=str(facts.get("arch") or "x86_64"),
        core_ids=tuple(int(i) for i in facts.get("core_ids") or ()),
        index=row.index,
    )


def host_inventory(host: Host, *, only_indices: set[int] | None = None) -> planning.Inventory:
    return planning.Inventory((planner_host(host, only_indices=only_indices),))

"""The planner's inventory, read from registered hosts, their latest samples and active leases."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import redis

from deployments import planning
from deployments.models import GpuLease
from monitoring import selectors as monitoring_selectors
from monitoring.models import Host

log = logging.getLogger(__name__)


def link_label(link: dict[str, Any]) -> str:
    level = str(link.get("level", "SYS"))
    return f"NV{int(link.get('nvlink_count') or 1)}" if level == "NV" else level


def host_links(host: Host) -> dict[tuple[int, int], str]:
    return {(int(lk["a"]), int(lk["b"])): link_label(lk) for lk in host.topology or []}


def free_bytes_by_gpu(host: Host) -> dict[int, int]:
    """Free memory per GPU index from the latest sample; empty when Redis has none."""
    try:
        sample = monitoring_selectors.latest_sample(host.name)
    except redis.RedisError as exc:
        log.warning("no live free-memory figures for %s: %s", host.name, exc)
        return {}
    if sample is None:
        return {}
    return {g.index: g.memory_free_bytes for g in sample.gpus if g.memory_free_bytes is not None}


def busy_gpu_ids(gpu_ids: Iterable[int]) -> set[int]:
    return set(
        GpuLease.objects.filter(gpu_id__in=list(gpu_ids), active=True).values_list(
            "gpu_id", flat=True
        )
    )


def planner_host(host: Host, *, only_indices: set[int] | None = None) -> planning.Host:
    gpus = [g for g in host.gpus.all() if g.present]
    busy = busy_gpu_ids(g.pk for g in gpus)
    free = free_bytes_by_gpu(host)
    planned = tuple(
        planning.Gpu(
            index=g.index,
            name=g.name,
            total_bytes=g.memory_total_bytes,
            free_bytes=free.get(g.index, g.memory_total_bytes),
            busy=g.pk in busy or (only_indices is not None and g.index not in only_indices),
        )
        for g in gpus
    )
    return planning.Host(host.name, planned, host_links(host))


def host_inventory(host: Host, *, only_indices: set[int] | None = None) -> planning.Inventory:
    return planning.Inventory((planner_host(host, only_indices=only_indices),))

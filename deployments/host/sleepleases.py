"""A sleeping engine's leases: most of its bytes given back, then taken again at its wake.

While an engine sleeps each of its leases counts only `asleep_bytes` (what the engine still
holds there: engines.sleep.kept_bytes), so a launch may reserve the rest. A wake takes the
whole lease back under the same locks as a launch (lifecycle.reservations): the GPU rows,
locked in primary-key order, then the active reservations summed; if another deployment has
taken the bytes meanwhile, the wake does not happen and says why (the engine would otherwise
allocate memory that another engine was promised: an over-commit). A launch and a wake that
race on one GPU are serialised by the row lock, so exactly one of them gets the bytes.
"""

from __future__ import annotations

from django.db import transaction

from deployments.catalog.registered import reserved_bytes
from deployments.engines.sleep import kept_bytes
from deployments.handoff.snapshot import GpuFigures
from deployments.models import Deployment, GpuLease
from deployments.planning.units import GIB
from monitoring.models import Gpu


class WakeBlocked(Exception):
    """Another deployment holds the bytes this engine gave back when it went to sleep."""


def figures_by_gpu(d: Deployment) -> dict[int, GpuFigures]:
    """The plan's figures per GPU index of this row's replica on its own host."""
    plan = d.snapshot
    if not plan.gpus or len(plan.per_gpu) != len(plan.gpus[0]):
        return {}
    return {
        s.index: f
        for s, f in zip(plan.gpus[0], plan.per_gpu, strict=True)
        if not s.host or s.host == d.host.name
    }


def lease_asleep(d: Deployment) -> dict[int, int]:
    """Count only what the sleeping engine keeps on each GPU; returns GPU index → bytes kept.
    In the caller's transaction, with the move to `sleeping`."""
    figures = figures_by_gpu(d)
    kept: dict[int, int] = {}
    for lease in GpuLease.objects.filter(deployment=d, active=True).select_related("gpu"):
        f = figures.get(lease.gpu.index, GpuFigures())
        kept_here = kept_bytes(
            non_torch_bytes=f.non_torch_bytes,
            cuda_graph_bytes=f.cuda_graph_bytes,
            total_bytes=f.total_bytes,
        )
        keep = min(kept_here, lease.memory_bytes)
        GpuLease.objects.filter(pk=lease.pk).update(asleep_bytes=keep)
        kept[lease.gpu.index] = keep
    return kept


@transaction.atomic
def lease_awake(d: Deployment) -> None:
    """Take every lease of `d` whole again, or raise WakeBlocked naming the GPU short."""
    leases = list(GpuLease.objects.filter(deployment=d, active=True))
    gpus = list(
        Gpu.objects.select_for_update()
        .filter(pk__in=[lease.gpu_id for lease in leases])
        .select_related("host")
        .order_by("pk")
    )
    held = reserved_bytes(g.pk for g in gpus)
    by_pk = {g.pk: g for g in gpus}
    for lease in leases:
        if lease.asleep_bytes is None:
            continue
        gpu = by_pk[lease.gpu_id]
        others = held.get(gpu.pk, 0) - lease.asleep_bytes
        if others + lease.memory_bytes > gpu.memory_total_bytes:
            free = max(gpu.memory_total_bytes - others - lease.asleep_bytes, 0)
            raise WakeBlocked(
                f"GPU {gpu.index} on {gpu.host.name}: the wake needs "
                f"{(lease.memory_bytes - lease.asleep_bytes) / GIB:.1f} GiB more, "
                f"{free / GIB:.1f} GiB is free; other deployments leased the memory this one "
                "gave back when it slept"
            )
    GpuLease.objects.filter(pk__in=[lease.pk for lease in leases]).update(asleep_bytes=None)

"""Reserving a plan's GPU memory inside the launch's (or scale's) transaction, after the team's
quota check."""

from __future__ import annotations

from collections import Counter

from django.db.models import Q
from django.utils import timezone

from deployments.catalog.registered import reserved_bytes
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment, GpuLease
from deployments.planning.units import GIB
from monitoring.models import DeviceKind, Gpu, Host
from teams import quota


class ReservationConflict(DeploymentError):
    """Another launch reserved the memory this plan counted on, after it was made."""


def reserve_bytes(
    rows: list[Deployment], host: Host, per_replica: list[dict[tuple[str, int], int]]
) -> None:
    """Reserve each replica's bytes on its devices (``rows[k]`` runs replica k + 1:
    ``per_replica[k]`` maps (host name, device index) to the bytes it leases there:
    lifecycle.placement.leases), or refuse if they no longer fit. A plan over several hosts
    leases on each of them here, in the same transaction.

    The device rows are locked in primary-key order (no deadlock between launches sharing
    GPUs) before the active reservations are summed, so a concurrent launch waits for this
    transaction and then sees its reservations: no interleaving over-commits a GPU. SQLite
    takes its one write lock at the transaction's first statement (IMMEDIATE), which does
    the same."""
    wanted: Counter[tuple[str, int]] = Counter()
    for replica in per_replica:
        wanted.update(replica)
    match = Q(pk__in=[])
    for name, index in wanted:
        match |= Q(host__name=name, index=index)
    gpus = list(Gpu.objects.select_for_update().filter(match).select_related("host").order_by("pk"))
    if len(gpus) != len(wanted):
        raise DeploymentError(f"A GPU of this plan is no longer registered on {host.name}.")
    if rows[0].team_id is not None:
        # a team's quota counts GPUs: a lease on a host's CPU row (RAM) is not one
        on_gpus = {(g.host.name, g.index) for g in gpus if g.kind == DeviceKind.GPU}
        try:
            quota.check_launch(
                team_id=rows[0].team_id,
                adding_gpus=sum(1 for r in per_replica for ref in r if ref in on_gpus),
                now=timezone.now(),
            )
        except quota.QuotaExceeded as exc:
            raise DeploymentError(str(exc)) from exc
    held = reserved_bytes(g.pk for g in gpus)
    for gpu in gpus:
        others, want = held.get(gpu.pk, 0), wanted[gpu.host.name, gpu.index]
        if others + want > gpu.memory_total_bytes:
            raise ReservationConflict(_over_message(gpu.host, gpu, others, want))
    by_ref = {(gpu.host.name, gpu.index): gpu for gpu in gpus}
    GpuLease.objects.bulk_create(
        GpuLease(deployment=row, gpu=by_ref[ref], memory_bytes=size)
        for row, replica in zip(rows, per_replica, strict=True)
        for ref, size in replica.items()
    )


def _over_message(host: Host, gpu: Gpu, others: int, wanted: int) -> str:
    free = max(gpu.memory_total_bytes - others, 0)
    return (
        f"GPU {gpu.index} on {host.name} has {free / GIB:.1f} GiB free of "
        f"{gpu.memory_total_bytes / GIB:.0f} GiB after other deployments' reservations; this "
        f"deployment needs {wanted / GIB:.1f} GiB there. Other launches took the memory first: "
        "plan again, on other GPUs or with a smaller load."
    )

"""Each deployment's share of the GPUs a deployment reserves: what every deployment on such a
GPU reserved, what its engine holds now (monitoring's attribution of GPU processes to
deployments), and what is left unreserved. Pure where it can be; a Redis outage only loses the
measured column."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import redis

from deployments.lifecycle.planned_vs_measured import MEASURED_STATUSES, gib
from deployments.models import Deployment, GpuLease
from monitoring import selectors
from monitoring.gpus.base import HostSample


@dataclass(frozen=True, slots=True)
class Share:
    """One deployment's reservation on one GPU, and what its engine holds there now."""

    deployment_id: int
    name: str
    reserved_bytes: int
    measured_bytes: int | None
    mine: bool


@dataclass(frozen=True, slots=True)
class SharedGpu:
    index: int
    total_bytes: int
    shares: tuple[Share, ...]

    @property
    def unreserved_bytes(self) -> int:
        return max(self.total_bytes - sum(s.reserved_bytes for s in self.shares), 0)

    @property
    def text(self) -> str:
        """``GPU 0 (80.00 GiB): this deployment reserves 18.40 GiB; chat-b 20.00 GiB; 41.60 GiB
        unreserved.``"""
        parts = [
            f"this deployment reserves {gib(s.reserved_bytes)}"
            if s.mine
            else f"{s.name} {gib(s.reserved_bytes)}"
            for s in self.shares
        ]
        return (
            f"GPU {self.index} ({gib(self.total_bytes)}): {'; '.join(parts)}; "
            f"{gib(self.unreserved_bytes)} unreserved."
        )


def measured_by_owner(
    sample: HostSample | None, owners: Mapping[str, str]
) -> dict[int, dict[str, int]]:
    """Bytes per GPU index and deployment name, from the processes monitoring attributed."""
    out: dict[int, dict[str, int]] = {}
    for gpu in sample.gpus if sample else ():
        for p in gpu.processes:
            name = owners.get(str(p.pid))
            if name and p.used_memory_bytes is not None:
                split = out.setdefault(gpu.index, {})
                split[name] = split.get(name, 0) + p.used_memory_bytes
    return out


def shared_gpus(
    d: Deployment, leases: Sequence[GpuLease], measured: Mapping[int, Mapping[str, int]]
) -> list[SharedGpu]:
    """Per GPU this deployment reserves: every active reservation on it, this one first."""
    out = []
    by_gpu: dict[int, list[GpuLease]] = {}
    for lease in leases:
        by_gpu.setdefault(lease.gpu_id, []).append(lease)
    for gpu_leases in by_gpu.values():
        gpu = gpu_leases[0].gpu
        seen = measured.get(gpu.index, {})
        shares = sorted(
            (
                Share(
                    lease.deployment_id,
                    lease.deployment.name,
                    lease.memory_bytes,
                    seen.get(lease.deployment.name),
                    lease.deployment_id == d.pk,
                )
                for lease in gpu_leases
            ),
            key=lambda s: (not s.mine, s.name),
        )
        out.append(SharedGpu(gpu.index, gpu.memory_total_bytes, tuple(shares)))
    return sorted(out, key=lambda g: g.index)


def share_table(d: Deployment) -> list[dict[str, object]]:
    """The detail page's shares: one entry per GPU this deployment reserves while it is
    active, with every deployment's reservation and measured bytes on that GPU."""
    if not d.is_active:
        return []
    gpu_ids = list(d.leases.filter(active=True).values_list("gpu_id", flat=True))
    leases = list(
        GpuLease.objects.filter(gpu_id__in=gpu_ids, active=True).select_related("gpu", "deployment")
    )
    measured: dict[int, dict[str, int]] = {}
    if d.status in MEASURED_STATUSES:
        try:
            measured = measured_by_owner(
                selectors.latest_sample(d.host.name), selectors.stored_owners(d.host.name)
            )
        except redis.RedisError:
            measured = {}
    return [
        {
            "gpu": g.index,
            "shared": len(g.shares) > 1,
            "text": g.text,
            "total": gib(g.total_bytes),
            "unreserved": gib(g.unreserved_bytes),
            "shares": [
                {
                    "deployment_id": s.deployment_id,
                    "name": s.name,
                    "mine": s.mine,
                    "reserved": gib(s.reserved_bytes),
                    "measured": gib(s.measured_bytes),
                }
                for s in g.shares
            ],
        }
        for g in shared_gpus(d, leases, measured)
    ]

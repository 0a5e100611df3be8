"""GPU hosts and their GPUs, as registered by each host worker."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from monitoring.gpus import cpu


class HostQuerySet(models.QuerySet["Host"]):
    def in_service(self) -> HostQuerySet:
        """Hosts not retired by an admin: the ones every list and plan target shows."""
        return self.filter(retired_at__isnull=True)

    def with_gpus(self) -> HostQuerySet:
        """``host.gpus.all()`` prefetched with the GPU rows only (no CPU row): for whatever
        means GPUs (inventory, topology, counts)."""
        return self.prefetch_related(models.Prefetch("gpus", queryset=Gpu.objects.gpus()))

    def with_devices(self) -> HostQuerySet:
        """``host.gpus.all()`` prefetched with every device row, the CPU's included (charts)."""
        return self.prefetch_related("gpus")


class Host(models.Model):
    """A GPU machine, one row per host worker name. Written by that host's worker
    (``monitoring.host.registration``: registration, heartbeats, offline on shutdown); an admin may
    retire it (``controlpanel.hosts``)."""

    name = models.CharField(max_length=100, unique=True)
    queue = models.CharField(max_length=120)
    address = models.CharField(max_length=100, blank=True)
    backend = models.CharField(max_length=20)
    simulated = models.BooleanField(default=False)
    backend_note = models.CharField(max_length=300, blank=True)
    topology = models.JSONField(default=list, blank=True)
    info = models.JSONField(default=dict, blank=True)
    registered_at = models.DateTimeField(default=timezone.now)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    # Set by an admin for a machine that is gone; its deployments and audit rows keep pointing
    # at it. A worker that registers or heartbeats under the name clears it again.
    retired_at = models.DateTimeField(null=True, blank=True)

    objects = HostQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def is_online(self, now: datetime | None = None) -> bool:
        if self.last_heartbeat is None:
            return False
        stale = timedelta(seconds=settings.HEARTBEAT_STALE_S)
        return (now or timezone.now()) - self.last_heartbeat <= stale


class DeviceKind(models.TextChoices):
    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU"


CPU_INDEX = cpu.CPU_INDEX  # the CPU row's index on every host (why this number: gpus/cpu.py)


class GpuQuerySet(models.QuerySet["Gpu"]):
    def gpus(self) -> GpuQuerySet:
        """GPUs only: what the planner's GPU inventory, topology, GPU counts and quotas mean."""
        return self.filter(kind=DeviceKind.GPU)

    def cpus(self) -> GpuQuerySet:
        """Each host's CPU row (vLLM's CPU build runs on it)."""
        return self.filter(kind=DeviceKind.CPU)


class Gpu(models.Model):
    """One device of a host, as its worker reports it at registration
    (``monitoring.host.registration.host_register``); a device no longer reported stays, not
    present. Live figures are not here: they are samples in Redis (``monitoring.history``).

    A row is a GPU, or (``kind`` "cpu", index ``CPU_INDEX``) the host's CPU and RAM as a device:
    leases, memory attribution, sample history and the charts serve it as they serve a GPU,
    ``memory_total_bytes`` being the RAM. Its cores, NUMA nodes and ISA flags are in
    ``Host.info["cpu"]`` (written with the registration; they change only with the machine),
    so that this table keeps the columns every device has. Whatever means "GPUs" filters with
    ``Gpu.objects.gpus()``."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    kind = models.CharField(max_length=3, choices=DeviceKind.choices, default=DeviceKind.GPU)
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=100)
    name = models.CharField(max_length=100)
    memory_total_bytes = models.BigIntegerField()
    pci_bus_id = models.CharField(max_length=40, blank=True)
    numa_node = models.SmallIntegerField(null=True, blank=True)
    present = models.BooleanField(default=True)

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["host__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_index_per_host")
        ]

    def __str__(self) -> str:
        return f"{self.host.name}:{self.index} {self.name}"

    @property
    def is_cpu(self) -> bool:
        return self.kind == DeviceKind.CPU

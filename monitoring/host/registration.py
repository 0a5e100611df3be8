"""The host worker's writes of its own rows: registration, heartbeats, offline on shutdown."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from monitoring.gpus.base import DeviceInfo, TopologyLink
from monitoring.models import Gpu, Host


def topology_rows(links: Sequence[TopologyLink]) -> list[dict[str, Any]]:
    return [{**dataclasses.asdict(link), "label": link.label} for link in links]


@transaction.atomic
def host_register(
    *,
    name: str,
    queue: str,
    address: str,
    backend: str,
    simulated: bool,
    backend_note: str,
    devices: Sequence[DeviceInfo],
    topology: Sequence[TopologyLink],
    info: dict[str, Any],
) -> Host:
    """Create or refresh the host and its devices (GPUs, and its CPU when it offers it);
    devices it no longer reports are marked absent."""
    now = timezone.now()
    host, _ = Host.objects.update_or_create(
        name=name,
        defaults={
            "queue": queue,
            "address": address,
            "backend": backend,
            "simulated": simulated,
            "backend_note": backend_note[:300],
            "topology": topology_rows(topology),
            "info": info,
            "registered_at": now,
            "last_heartbeat": now,
            "retired_at": None,
        },
    )
    for device in devices:
        Gpu.objects.update_or_create(
            host=host,
            index=device.index,
            defaults={
                "uuid": device.uuid,
                "name": device.name,
                "memory_total_bytes": device.memory_total_bytes,
                "pci_bus_id": device.pci_bus_id,
                "numa_node": device.numa_node,
                "kind": device.kind,
                "present": True,
            },
        )
    present = [d.index for d in devices]
    Gpu.objects.filter(host=host).exclude(index__in=present).update(present=False)
    return host


def host_heartbeat(*, name: str) -> bool:
    """False when the host row is gone (deleted by an admin): the caller registers again."""
    now = timezone.now()
    return Host.objects.filter(name=name).update(last_heartbeat=now, retired_at=None) == 1


def host_mark_offline(*, name: str) -> None:
    """On a clean worker shutdown: the host shows offline at once, not after the stale delay."""
    Host.objects.filter(name=name).update(last_heartbeat=None)

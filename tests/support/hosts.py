"""Registered hosts as rows only (no worker): an online host with simulated GPUs."""

from __future__ import annotations

from django.utils import timezone

from monitoring.models import Gpu, Host

GIB = 1 << 30


def sim_host(name: str, gpus: int, gpu_bytes: int = 80 * GIB, *, gpu_name: str = "H100") -> Host:
    host = Host.objects.create(
        name=name,
        queue=f"host.{name}",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    for index in range(gpus):
        Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-{name}-{index}",
            name=gpu_name,
            memory_total_bytes=gpu_bytes,
        )
    return host

"""Registered hosts as rows only (no worker): an online host with simulated GPUs."""

from __future__ import annotations

from django.utils import timezone

from monitoring.models import CPU_INDEX, DeviceKind, Gpu, Host

GIB = 1 << 30
CPU_FACTS = {
    "name": "Test EPYC",
    "cores": 2,
    "core_ids": [0, 1],
    "numa_nodes": 1,
    "isa": ["avx2"],
    "arch": "x86_64",
}


def sim_host(
    name: str,
    gpus: int,
    gpu_bytes: int = 80 * GIB,
    *,
    gpu_name: str = "H100",
    ram_bytes: int | None = None,
) -> Host:
    """With ``ram_bytes``, the host also offers its CPU (a row of kind "cpu", as a worker
    registers it, and its facts in ``Host.info``)."""
    host = Host.objects.create(
        name=name,
        queue=f"host.{name}",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
        info={"cpu": CPU_FACTS} if ram_bytes else {},
    )
    if ram_bytes:
        Gpu.objects.create(
            host=host,
            index=CPU_INDEX,
            kind=DeviceKind.CPU,
            uuid=f"CPU-{name}",
            name="CPU · Test EPYC · 2 cores",
            memory_total_bytes=ram_bytes,
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

"""Planned vs measured memory per leased GPU: attribution from a monitoring sample, the JSON."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from deployments.lifecycle.planned_vs_measured import memory_rows
from deployments.models import Deployment, GpuLease, Status
from monitoring.gpus.base import GpuProcess, GpuSample, HostSample
from monitoring.models import Gpu, Host

GIB = 1 << 30


def gpu(index: int, *processes: GpuProcess) -> GpuSample:
    return GpuSample(
        **{
            name: None
            for name in GpuSample.__dataclass_fields__
            if name not in ("index", "uuid", "processes", "throttle_reasons")
        },
        index=index,
        uuid=f"GPU-{index}",
        processes=processes,
        throttle_reasons=(),
    )


def test_measured_counts_only_this_engines_processes() -> None:
    sample = HostSample(
        ts_ms=0,
        gpus=(
            gpu(0, GpuProcess(100, 30 * GIB, "vllm"), GpuProcess(101, 2 * GIB, "worker")),
            gpu(1, GpuProcess(102, 31 * GIB, "vllm"), GpuProcess(900, 5 * GIB, "someone")),
            gpu(2, GpuProcess(903, 7 * GIB, "other")),
        ),
    )
    owners = {"100": "llama", "101": "llama", "102": "llama", "903": "qwen"}
    planned = [(0, 33 * GIB), (1, 33 * GIB), (2, 33 * GIB), (3, 33 * GIB)]
    rows = memory_rows(planned, sample, owners, name="llama", pid=100)
    assert [(r.gpu, r.measured_bytes, r.processes) for r in rows] == [
        (0, 32 * GIB, 2),
        (1, 31 * GIB, 1),
        (2, None, 0),  # qwen's process is not ours
        (3, None, 0),  # no sample of that GPU
    ]
    assert rows[0].difference_bytes == -1 * GIB
    # The engine's own pid counts even before the owners map has caught up.
    assert memory_rows([(0, GIB)], sample, {}, name="llama", pid=100)[0].measured_bytes == (
        30 * GIB
    )


@pytest.fixture
def deployment(operator: Any) -> Deployment:
    host = Host.objects.create(name="memhost", queue="host.memhost", simulated=True)
    g = Gpu.objects.create(host=host, index=2, uuid="GPU-2", name="H100", memory_total_bytes=GIB)
    d = Deployment.objects.create(
        name="memdep", model_id="/m", engine="transformers", host=host, created_by=operator
    )
    GpuLease.objects.create(deployment=d, gpu=g, memory_bytes=3 * GIB)
    return d


def test_memory_endpoint_roles_and_no_sample(
    client: Client, viewer: Any, outsider: Any, deployment: Deployment, settings: Any
) -> None:
    url = f"/deployments/{deployment.pk}/memory/"
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    client.force_login(viewer)
    Deployment.objects.filter(pk=deployment.pk).update(
        status=Status.RUNNING, updated_at=timezone.now()
    )
    data = client.get(url).json()
    assert data["rows"] == [
        {
            "gpu": 2,
            "planned_bytes": 3 * GIB,
            "measured_bytes": None,
            "processes": 0,
            "difference_bytes": None,
            "planned": "3.00 GiB",
            "measured": "—",
            "difference": "—",
        }
    ]
    assert "No recent GPU sample from memhost" in data["note"]

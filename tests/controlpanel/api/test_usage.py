"""Usage through the API: GPU-hours derived from the lease rows (each lease's time held,
clipped to the window), by user and by deployment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from controlpanel.api.audit import lease_gpu_hours
from deployments.models import Deployment, GpuLease
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def lease(d: Deployment, gpu: Any, start_h: float, end_h: float | None) -> None:
    row = GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=1, active=end_h is None)
    released = None if end_h is None else T0 + timedelta(hours=end_h)
    GpuLease.objects.filter(pk=row.pk).update(
        created_at=T0 + timedelta(hours=start_h), released_at=released
    )


def test_gpu_hours_are_clipped_to_the_window(operator: Any, admin_user: Any) -> None:
    host = sim_host("usage", 2)
    g0, g1 = host.gpus.order_by("index")
    a = Deployment.objects.create(name="a", model_id="m", host=host, created_by=operator)
    b = Deployment.objects.create(name="b", model_id="m", host=host, created_by=admin_user)
    lease(a, g0, 0, 10)  # 10 h, all inside
    lease(a, g1, 0, 10)  # 10 h: a tensor-parallel pair counts both GPUs
    lease(b, g0, -5, 2)  # 7 h held, 2 inside the window
    lease(b, g1, 20, None)  # still held: 4 h up to the window's end
    lease(b, g1, 30, 40)  # after the window
    usage = lease_gpu_hours(since=T0, until=T0 + timedelta(hours=24))
    assert usage["gpu_hours"] == 26
    assert usage["by_user"] == [
        {"key": "otto-operator", "gpu_hours": 20},
        {"key": "ada-admin", "gpu_hours": 6},
    ]
    assert {r["key"]: r["gpu_hours"] for r in usage["by_deployment"]} == {"a": 20, "b": 6}


def test_the_usage_endpoint_answers_for_the_last_days(viewer: Any) -> None:
    client = Client()
    client.force_login(viewer)
    body = client.get("/api/v1/usage?days=7").json()
    assert body["gpu_hours"] == 0 and body["by_user"] == []
    since, until = (datetime.fromisoformat(body[k]) for k in ("since", "until"))
    assert until - since == timedelta(days=7)
    assert client.get("/api/v1/usage?days=0").status_code == 422

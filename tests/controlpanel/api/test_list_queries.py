"""The deployment list costs the same queries for one deployment as for twelve (replicas and
leases prefetched, not read per deployment)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from deployments.models import Deployment, GpuLease
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db


def queries(client: Client) -> tuple[int, list[dict[str, Any]]]:
    with CaptureQueriesContext(connection) as seen:
        body = client.get("/api/v1/deployments").json()
    return len(seen), body


def test_listing_does_not_query_per_deployment(viewer: Any, operator: Any) -> None:
    host = sim_host("q", 2)
    gpu = host.gpus.get(index=1)
    client = Client()
    client.force_login(viewer)

    def add(i: int) -> None:
        d = Deployment.objects.create(name=f"d{i}", model_id="m", host=host, created_by=operator)
        r = Deployment.objects.create(
            name=f"d{i}",
            model_id="m",
            host=host,
            created_by=operator,
            replica_of=d,
            replica_index=2,
        )
        GpuLease.objects.create(deployment=r, gpu=gpu, memory_bytes=1)

    add(0)
    one, body = queries(client)
    assert body[0]["replicas"][1]["gpus"] == [1]
    for i in range(1, 12):
        add(i)
    many, body = queries(client)
    assert len(body) == 12 and many == one

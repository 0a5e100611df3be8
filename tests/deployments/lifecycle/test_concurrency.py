"""On PostgreSQL: racing launches for overlapping GPUs never double-book a GPU."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.utils import timezone

from deployments import planning
from deployments.catalog.demo_model import make_tiny_llama
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import GpuLease
from monitoring.models import Gpu, Host

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def four_gpu_host(tmp_path_factory, settings):
    root = tmp_path_factory.mktemp("models")
    make_tiny_llama(root / "tiny")
    settings.MODEL_ROOTS = [root]
    host = Host.objects.create(
        name="racehost",
        queue="host.racehost",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    for i in range(4):
        Gpu.objects.create(
            host=host, index=i, uuid=f"GPU-{i}", name="H100", memory_total_bytes=80 << 30
        )
    return host


def test_twenty_racing_creates(four_gpu_host, operator) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the race is only meaningful on PostgreSQL")
    barrier = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        request = LaunchRequest(
            name=f"race-{i}",
            model_ref="local:0/tiny",
            host_name="racehost",
            plan_request=planning.PlanRequest(tensor_parallel_size=1),
        )
        barrier.wait()
        try:
            deployment_create(user=operator, request=request)
            result = "won"
        except DeploymentError as exc:
            result = f"lost: {exc}"
        finally:
            connections.close_all()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    wins = [o for o in outcomes if o == "won"]
    losses = [o for o in outcomes if o != "won"]
    assert len(outcomes) == 20
    assert 1 <= len(wins) <= 4
    active = list(GpuLease.objects.filter(active=True).values_list("gpu_id", flat=True))
    assert len(active) == len(set(active)) == len(wins)
    assert all(
        ("leased" in o or "fits" in o or "free" in o or "busy" in o.lower()) for o in losses
    ), losses

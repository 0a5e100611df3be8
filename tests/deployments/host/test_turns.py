"""Engines sharing a GPU start in launch order: a later launch waits while an earlier one on
the same GPU is pending or starting (vLLM profiles the memory it sees consumed)."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from deployments.host import turns
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu, Host

pytestmark = pytest.mark.django_db

GIB = 2**30


def deployment(host: Host, name: str, user: Any, gpus: list[Gpu], status: Status) -> Deployment:
    d = Deployment.objects.create(
        name=name, model_id="m", host=host, created_by=user, status=status
    )
    for gpu in gpus:
        GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=10 * GIB)
    return d


@pytest.fixture
def gpus(db: None) -> list[Gpu]:
    host = Host.objects.create(
        name="turnhost", queue="host.turnhost", backend="nvml", last_heartbeat=timezone.now()
    )
    return [
        Gpu.objects.create(
            host=host, index=i, uuid=f"T-{i}", name="H100", memory_total_bytes=80 * GIB
        )
        for i in range(2)
    ]


def test_a_later_launch_waits_for_an_earlier_engine_on_its_gpu(gpus, operator) -> None:
    host = gpus[0].host
    first = deployment(host, "first", operator, [gpus[0]], Status.STARTING)
    elsewhere = deployment(host, "elsewhere", operator, [gpus[1]], Status.PENDING)
    second = deployment(host, "second", operator, [gpus[0], gpus[1]], Status.PENDING)
    assert turns.ahead_on_gpus(second) == ["elsewhere", "first"]
    assert turns.ahead_on_gpus(first) == []  # the earliest never waits
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the earlier engines come up while the later one waits
        sleeps.append(seconds)
        Deployment.objects.filter(pk=[first.pk, elsewhere.pk][len(sleeps) - 1]).update(
            status=Status.RUNNING
        )

    turns.wait_for_turn(second, sleep=sleep)
    assert sleeps == [turns.POLL_S, turns.POLL_S]
    assert turns.ahead_on_gpus(second) == []


def test_a_launch_stopped_while_it_waits_stops_waiting(gpus, operator) -> None:
    host = gpus[0].host
    deployment(host, "first", operator, [gpus[0]], Status.STARTING)
    second = deployment(host, "second", operator, [gpus[0]], Status.PENDING)
    calls: list[float] = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        Deployment.objects.filter(pk=second.pk).update(status=Status.STOPPING)

    turns.wait_for_turn(second, sleep=sleep)
    assert calls == [turns.POLL_S]


def test_simulated_gpus_do_not_wait(gpus, operator) -> None:
    host = gpus[0].host
    Host.objects.filter(pk=host.pk).update(simulated=True)
    deployment(host, "first", operator, [gpus[0]], Status.STARTING)
    second = deployment(host, "second", operator, [gpus[0]], Status.PENDING)
    second = Deployment.objects.select_related("host").get(pk=second.pk)

    def sleep(seconds: float) -> None:
        raise AssertionError("a simulated GPU has no memory to profile")

    assert turns.wait_for_turn(second, sleep=sleep) == 0.0

"""`fail()` is a compare-and-set from the status its caller observed: a watchdog or launch
task holding a row read as `starting` cannot turn a `stopping` set since into `failed`."""

from __future__ import annotations

import pytest

from deployments.host import transitions
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu, Host


@pytest.mark.django_db(transaction=True)
def test_a_stale_observer_cannot_fail_a_stopping_deployment(operator) -> None:
    host = Host.objects.create(name="stalehost", queue="host.stalehost", backend="simulated")
    gpu = Gpu.objects.create(
        host=host, index=0, uuid="GPU-stale", name="H100", memory_total_bytes=80 << 30
    )
    d = Deployment.objects.create(
        name="stale", model_id="m", engine="transformers", host=host, created_by=operator
    )
    GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=1 << 30)
    assert d.transition(Status.STARTING, reason="spawned")
    stale = Deployment.objects.get(pk=d.pk)  # what the watchdog read: starting
    assert Deployment.objects.get(pk=d.pk).transition(Status.STOPPING, reason="stop asked")

    assert not transitions.fail(stale, "The engine process exited unexpectedly.")

    d.refresh_from_db()
    assert d.status == Status.STOPPING and d.failure_reason == ""  # failed before the fix
    assert GpuLease.objects.filter(deployment=d, active=True).count() == 1  # the stop frees it
    assert not d.events.filter(new_status=Status.FAILED).exists()

"""Redis (the Celery broker) stopped during a launch and during a stop: the user gets a clear
note instead of a 500, the host worker's sweeper does the work from the database, and a
deployment left `stopping` can be stopped again."""

from __future__ import annotations

import time

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from deployments.lifecycle.services import deployment_stop
from deployments.models import Deployment
from tests.faults.support import FAST_HOST, check_after, launch, wait_status
from tests.support.workers import start_sim_worker

HOST = "faulthost"


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(240)
def test_redis_down_during_launch(host_worker, model_root, operator, broker) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root, REDIS_URL=broker.url, **FAST_HOST)
    broker.stop()
    start = time.monotonic()
    d = launch(operator, "outage-launch", HOST)  # raised after commit before the fix
    assert time.monotonic() - start < 10
    assert "did not answer" in getattr(d, "queue_note", "")
    assert wait_status(d, {"running", "failed"}, 150, worker) and d.status == "running"
    act_again_s = time.monotonic() - start
    broker.start()
    pid = d.pid
    deployment_stop(user=operator, deployment=d)
    wait_status(d, {"stopped"}, 60, worker)
    check_after("Redis stopped during launch", act_again_s, [pid], ["deployment.create"])


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(240)
def test_redis_down_during_stop(host_worker, model_root, operator, broker) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root, REDIS_URL=broker.url, **FAST_HOST)
    d = launch(operator, "outage-stop", HOST)
    wait_status(d, {"running"}, 150, worker)
    broker.stop()
    client = Client()
    client.force_login(operator)
    start = time.monotonic()
    response = client.post(f"/deployments/{d.pk}/stop/")
    assert response.status_code == 302  # a 500 before the fix
    notes = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("did not answer" in n for n in notes), notes
    assert Deployment.objects.get(pk=d.pk).status in ("stopping", "stopped")
    again = client.post(f"/deployments/{d.pk}/stop/")  # Stop again: refused before the fix
    notes = [str(m) for m in get_messages(again.wsgi_request)]
    assert again.status_code == 302 and not any("already" in n for n in notes), notes
    wait_status(d, {"stopped"}, 60, worker)
    act_again_s = time.monotonic() - start
    broker.start()
    check_after("Redis stopped during stop", act_again_s, [d.pid], ["deployment.stop"])

"""Redis (the Celery broker) stopped during a launch and during a stop: the user gets a clear
note instead of a 500, the host worker's sweeper does the work from the database, and a
deployment left `stopping` can be stopped again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from deployments.lifecycle.services import deployment_stop
from deployments.models import Deployment
from tests.faults.support import FAST_HOST, check_after, launch, status_of, wait_status
from tests.support.waiting import wait_for
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


STUB_ENGINE = Path(__file__).resolve().parents[1] / "support" / "stub_engine.py"


@pytest.mark.worker
@pytest.mark.timeout(240)
def test_the_host_worker_outlives_redis_lost_with_a_launch_in_hand(
    host_worker, model_root, operator, broker, tmp_path
) -> None:
    """Redis stops while the worker holds the launch's unacknowledged message (its engine still
    loading): kombu's restore of that message on the lost connection used to end the worker
    ("Unrecoverable error: AttributeError", controlpanel/brokertransport.py)."""
    loaded = tmp_path / "engine-loaded"
    worker = start_sim_worker(
        host_worker,
        HOST,
        model_root,
        REDIS_URL=broker.url,
        STUB_ENGINE_READY_FILE=str(loaded),
        SHARDBOARD_TRANSFORMERS_BIN=str(STUB_ENGINE),  # faults.support launches transformers
        **FAST_HOST,
    )
    d = launch(operator, "outage-in-hand", HOST)
    wait_for(lambda: status_of(d) == "starting" and d.pid)  # the launch task waits on /health
    broker.stop()
    wait_for(lambda: "Connection to broker lost" in worker.log())
    loaded.touch()  # the engine is ready: the task in hand finishes without Redis
    wait_status(d, {"running"}, 150, worker)
    assert worker.proc.poll() is None, worker.log()[-4000:]
    assert "Unrecoverable error" not in worker.log()
    broker.start()
    deployment_stop(user=operator, deployment=d)  # a Celery message: the consumer is back
    wait_status(d, {"stopped"}, 60, worker)
    assert worker.proc.poll() is None

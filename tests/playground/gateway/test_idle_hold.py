"""A request that arrives while its deployment is going to sleep or scaling to zero is held and
served, never answered 409 or 503 (issue 40, item 6).

The host worker's part is its own code (deployments.host.idle.go_idle, run here in a thread, on
the test's Redis and database); the engine is the stand-in that streams slowly, so a request in
flight keeps the replica draining for as long as the test says. Two moments:

- still draining (going idle, not yet committed): the new request calls the sleep off; the
  replica comes back into rotation and answers it, and stays running;
- already stopping to scale to zero: the request is held until it has, then it is started
  again on demand and answers.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.db import connections

from controlpanel.models import AuditEvent
from deployments.host import idle as host_idle
from deployments.live import drain
from deployments.live import idle as idle_marks
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu
from tests.playground.gateway.test_wake_hold import fresh
from tests.support.gateway import bearer_for
from tests.support.waiting import wait_for

HOLD_S = 30
DRAIN_S = 3  # each drain waits this long for the stream the test keeps open


@pytest.fixture
def holding(gateway_settings: Any) -> Any:
    gateway_settings.SHARDBOARD_WAKE_HOLD_S = HOLD_S  # read by the server when it forks
    gateway_settings.SHARDBOARD_DRAIN_GRACE_S = DRAIN_S  # read by the host's code, here
    gateway_settings.SHARDBOARD_STOP_GRACE_S = 1
    return gateway_settings


def stream(url: str, headers: dict[str, str], model: str) -> tuple[int, str]:
    body = {"model": model, "prompt": "hi", "max_tokens": 4, "stream": True}
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers=headers, timeout=60
    ) as answer:
        return answer.status_code, "\n".join(answer.iter_lines())


def post(url: str, headers: dict[str, str], model: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = httpx.post(
        f"{url}/v1/completions",
        json={"model": model, "prompt": "hi", "max_tokens": 4},
        headers=headers,
        timeout=60,
    )
    return answer, time.monotonic() - started


def go_idle(d: Deployment) -> dict[str, Any]:
    try:
        return host_idle.go_idle(d.pk, idle_s=600)
    finally:
        connections.close_all()


def idling(make_deployment: Any, stub: Any, name: str) -> Deployment:
    fresh(name)
    d = make_deployment(name, stub.port)
    Deployment.objects.filter(pk=d.pk).update(sleep_after_s=60)
    idle_marks.going_end(d.pk)  # Redis outlives each test's database
    stub.hold_after_first = threading.Event()
    return d


def test_a_request_while_it_drains_to_sleep_calls_the_sleep_off(
    holding: Any, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    d = idling(make_deployment, stub, "drowsy")
    auth = bearer_for(operator)
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(stream, server.url, auth, "drowsy")  # in flight: the drain waits
        assert stub.first_sent.wait(30)
        time.sleep(1.1)  # the first request's own time is recorded before the idle decision
        host = pool.submit(go_idle, d)
        wait_for(lambda: idle_marks.going_state([d.pk]) == {d.pk: idle_marks.GOING})
        later = pool.submit(post, server.url, auth, "drowsy")  # finds the replica drained
        time.sleep(1.0)
        assert not later.done()  # held, not refused
        stub.hold_after_first.set()
        assert first.result(timeout=60)[0] == 200
        answer, _ = later.result(timeout=60)
        outcome = host.result(timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"], answer.text
    assert outcome == {"called_off": d.pk}
    d.refresh_from_db()
    assert d.status == Status.RUNNING
    assert drain.in_flight(d.pk) == 0 and idle_marks.going_state([d.pk]) == {}
    off = AuditEvent.objects.get(action="deployment.sleep_called_off")
    assert off.detail["replica_id"] == d.pk
    assert "a request arrived as it was going idle" in off.detail["reason"]
    assert not AuditEvent.objects.filter(action="deployment.scale_to_zero").exists()


def test_a_request_while_it_scales_to_zero_is_held_then_served(
    holding: Any, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    d = idling(make_deployment, stub, "sleepy")
    gpu = Gpu.objects.create(
        host=d.host, index=0, uuid="GPU-z", name="H100", memory_total_bytes=80 << 30
    )
    GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=1 << 30, active=True)
    auth = bearer_for(operator)

    def started() -> None:  # the host worker's launch: the engine runs again 1 s later
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status == Status.PENDING, timeout_s=60)
        time.sleep(1.0)
        drain.drain_end([d.pk])
        Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING)
        connections.close_all()

    with ThreadPoolExecutor(max_workers=4) as pool:
        first = pool.submit(stream, server.url, auth, "sleepy")  # outlasts the first drain
        assert stub.first_sent.wait(30)
        time.sleep(1.1)
        host = pool.submit(go_idle, d)
        # Stopping, or already past it on a loaded machine (the stop of a stand-in is quick):
        # the request below then arrives while it is scaled to zero or starting, and is held.
        gone = (Status.STOPPING, Status.SCALED_TO_ZERO, Status.PENDING)
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status in gone)
        launch = pool.submit(started)
        later = pool.submit(post, server.url, auth, "sleepy")  # arrives while it stops
        outcome = host.result(timeout=60)
        stub.hold_after_first.set()
        first.result(timeout=60)
        answer, waited_s = later.result(timeout=HOLD_S + 30)
        launch.result(timeout=30)
    assert outcome == {"scaled_to_zero": d.pk}
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"], answer.text
    d.refresh_from_db()
    assert d.status == Status.RUNNING
    assert d.events.filter(old_status=Status.SCALED_TO_ZERO, new_status=Status.PENDING).count() == 1
    wake = AuditEvent.objects.get(action="deployment.wake", target_id=str(d.pk))
    assert wake.detail["how"] == "start"
    assert waited_s >= 1.0  # held through the stop and the start

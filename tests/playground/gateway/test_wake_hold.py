"""The gateway holds a request for a sleeping or scaled-to-zero deployment while it wakes: one
wake for all the requests, the request served once a replica runs, a 503 with Retry-After
(OpenAI's error shape) past SHARDBOARD_WAKE_HOLD_S. No host worker here: the test plays its
part (the row's state), so the bound and the single wake are what is measured."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.db import connections
from django.utils import timezone

from controlpanel import redisconn
from controlpanel.models import AuditEvent
from deployments.live import idle as idle_marks
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu
from tests.support.gateway import bearer_for
from tests.support.waiting import wait_for

HOLD_S = 3
COMPLETION = {"prompt": "hi", "max_tokens": 4}


@pytest.fixture
def short_hold(gateway_settings: Any) -> None:
    gateway_settings.SHARDBOARD_WAKE_HOLD_S = HOLD_S  # read by the server when it forks


def fresh(name: str) -> None:
    """Redis outlives each test's database: no wake mark of an earlier test under this name."""
    idle_marks.wake_done(name)
    redisconn.client(connect_timeout_s=1).delete(idle_marks.last_request_key(name))


def post(url: str, headers: dict[str, str], model: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = httpx.post(
        f"{url}/v1/completions", json={**COMPLETION, "model": model}, headers=headers, timeout=30
    )
    return answer, time.monotonic() - started


def test_a_request_is_held_while_it_wakes_then_served(
    short_hold: None, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    fresh("dozy")
    d = make_deployment("dozy", stub.port, engine="vllm", status=Status.SLEEPING)

    def woken() -> None:  # the host worker's part: the engine answers again after 1 s
        time.sleep(1.0)
        Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING)
        connections.close_all()

    threading.Thread(target=woken).start()
    answer, waited_s = post(server.url, bearer_for(operator), "dozy")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"], answer.text
    assert 0.9 <= waited_s < HOLD_S, waited_s
    last = idle_marks.last_request_s("dozy")
    assert last is not None and time.time() - last < 10  # the idle clock starts again


def test_one_wake_for_many_requests_and_a_503_past_the_bound(
    short_hold: None, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    fresh("napping")
    d = make_deployment("napping", stub.port, status=Status.SCALED_TO_ZERO)
    gpu = Gpu.objects.create(
        host=d.host, index=0, uuid="GPU-w", name="H100", memory_total_bytes=80 << 30
    )
    GpuLease.objects.create(
        deployment=d, gpu=gpu, memory_bytes=2 << 30, active=False, released_at=timezone.now()
    )
    auth = bearer_for(operator)
    # No host worker listens: the start on demand is sent and never done, so every held
    # request ends at the bound.
    with ThreadPoolExecutor(max_workers=5) as pool:
        answers = list(pool.map(lambda _: post(server.url, auth, "napping"), range(5)))
    for answer, waited_s in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        error = answer.json()["error"]
        assert error["type"] == "deployment_waking" and error["code"] == 503
        assert "SHARDBOARD_WAKE_HOLD_S" in error["message"]
        assert HOLD_S - 0.5 <= waited_s < HOLD_S + 5, waited_s
    d.refresh_from_db()
    assert d.status == Status.PENDING and d.woke_at is not None  # started once, on demand
    starts = d.events.filter(old_status=Status.SCALED_TO_ZERO, new_status=Status.PENDING)
    assert starts.count() == 1
    assert AuditEvent.objects.filter(action="deployment.wake").count() == 1
    lease = GpuLease.objects.get(deployment=d, active=True)
    assert (lease.gpu_id, lease.memory_bytes) == (gpu.pk, 2 << 30)  # its GPU and bytes again


def test_a_stopped_deployment_is_not_held(
    short_hold: None, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    fresh("ended")
    make_deployment("ended", stub.port, status=Status.STOPPED)
    answer, waited_s = post(server.url, bearer_for(operator), "ended")
    assert answer.status_code == 409 and waited_s < HOLD_S, answer.text


def test_a_request_arriving_during_a_start_on_demand_is_held_too(
    short_hold: None, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    fresh("waker")
    d = make_deployment("waker", stub.port, status=Status.SCALED_TO_ZERO)
    gpu = Gpu.objects.create(
        host=d.host, index=0, uuid="GPU-x", name="H100", memory_total_bytes=80 << 30
    )
    GpuLease.objects.create(
        deployment=d, gpu=gpu, memory_bytes=1 << 30, active=False, released_at=timezone.now()
    )
    auth = bearer_for(operator)

    def started() -> None:  # the host worker's part: the engine runs 1.5 s after the start
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status == Status.PENDING)
        time.sleep(1.5)
        Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING)
        connections.close_all()

    with ThreadPoolExecutor(max_workers=3) as pool:
        host = pool.submit(started)
        first = pool.submit(post, server.url, auth, "waker")
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status == Status.PENDING)
        later = pool.submit(post, server.url, auth, "waker")  # arrives while it starts
        answers = [first.result(timeout=30), later.result(timeout=30)]
        host.result(timeout=30)
    for answer, waited_s in answers:
        assert answer.status_code == 200 and waited_s < HOLD_S, (answer.text, waited_s)
    assert d.events.filter(new_status=Status.PENDING).count() == 1

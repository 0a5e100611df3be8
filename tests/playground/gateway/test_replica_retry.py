"""Two replicas behind one name, one of them refusing connections: the gateway's real server
retries each request once on the other, and keeps the refusing one out of its rotation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis
from django.conf import settings

from controlpanel.models import AuditEvent
from deployments.models import Deployment
from playground.gateway import balance
from tests.support.gateway import bearer_for
from tests.support.private_redis import free_port
from tests.support.waiting import wait_for


@pytest.fixture
def least_loaded(gateway_settings: Any) -> None:
    """Least loaded only, set before the server forks: with prefix affinity every "hi" would go
    to the one replica its prefix prefers, and the dead one might never be tried."""
    gateway_settings.PLAYGROUND_ROUTING_LOAD_FACTOR = 0


def test_a_refused_connection_is_retried_on_another_replica(
    least_loaded: None, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    dead = make_deployment("pair", free_port())  # nothing listens there
    alive = make_deployment("pair-2", stub.port)
    Deployment.objects.filter(pk=alive.pk).update(name="pair", replica_of=dead, replica_index=2)
    auth = bearer_for(operator)
    body = {"model": "pair", "prompt": "hi", "max_tokens": 4}
    client = redis.Redis.from_url(settings.REDIS_URL)
    answers, marks = [], []
    for _ in range(6):
        answers.append(
            httpx.post(f"{server.url}/v1/completions", json=body, headers=auth, timeout=10)
        )
        # read as each answer comes back: on a loaded machine the six answers and their
        # audit rows can outlast the mark's DOWN_S
        marks.append(client.pttl(balance.down_key(dead.pk)))
    assert [a.status_code for a in answers] == [200] * 6, answers[0].text
    assert len(stub.seen) == 6
    rows = wait_for(
        lambda: (
            (r := list(AuditEvent.objects.filter(action="playground.request")))
            and len(r) == 6
            and r
        )
    )
    assert {row.target_id for row in rows} == {str(alive.pk)}
    # out of every web process's rotation, for DOWN_S
    assert any(0 < marked <= balance.DOWN_S * 1000 for marked in marks), marks
    assert balance.in_flight([dead.pk, alive.pk]) == {dead.pk: 0, alive.pk: 0}


def test_a_lone_replica_refusing_still_answers_with_its_own_error(
    server: Any, make_deployment: Any, operator: Any
) -> None:
    port = free_port()
    make_deployment("solo", port)
    body = {"model": "solo", "prompt": "hi", "max_tokens": 4}
    for _ in range(2):  # the second too, although the first marked it down
        answer = httpx.post(
            f"{server.url}/v1/completions", json=body, headers=bearer_for(operator), timeout=10
        )
        assert answer.status_code == 502
        error = answer.json()["error"]
        assert error["type"] == "engine_unreachable" and f":{port}" in error["message"]

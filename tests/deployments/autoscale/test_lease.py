"""The autoscaler's fleet-wide lease on the real Redis: one holder at a time, renewed by its
holder, taken over by another worker once it lapses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlpanel import redisconn
from deployments.host.autoscaler import LEASE_KEY, holds_lease
from tests.support.waiting import wait_for


@pytest.fixture
def client() -> Iterator[Any]:
    redis = redisconn.client(connect_timeout_s=1.0, timeout_s=2.0)
    redis.delete(LEASE_KEY)
    yield redis
    redis.delete(LEASE_KEY)


def test_one_holder_renews_and_another_takes_over_after_it_lapses(client: Any) -> None:
    assert holds_lease(client, "worker-a", 0.5)
    assert not holds_lease(client, "worker-b", 0.5)
    assert holds_lease(client, "worker-a", 0.5)  # renewed, still a's
    assert client.get(LEASE_KEY) == b"worker-a"
    wait_for(lambda: holds_lease(client, "worker-b", 0.5), timeout_s=5, interval_s=0.05)
    assert not holds_lease(client, "worker-a", 0.5)

"""A drain's wait (deployments.live.drain) on a real redis-server of the test's own."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

from deployments.live import drain
from playground.gateway import balance
from playground.gateway.upstream import Target
from tests.support.private_redis import PrivateRedis


@pytest.fixture
def drain_redis(private_redis: PrivateRedis, settings: Any) -> PrivateRedis:
    settings.REDIS_URL = private_redis.url
    return private_redis


def _target(pk: int) -> Target:
    return Target(pk, "m", "transformers", f"http://127.0.0.1:{9000 + pk}", None)


def test_the_wait_ends_when_the_last_stream_is_released(drain_redis: PrivateRedis) -> None:
    loop = asyncio.new_event_loop()
    try:
        lease = loop.run_until_complete(balance.acquire([_target(5)], ttl_s=60, now_s=loop.time()))
        assert drain.in_flight(5) == 1
        client = redis.Redis.from_url(drain_redis.url)
        timer = threading.Timer(0.6, lambda: client.zrem(drain.inflight_key(5), lease.member))
        timer.start()
        started = time.monotonic()
        done = drain.drain_replica(5)
        timer.join()
    finally:
        loop.close()
    assert done.clean and 0.5 <= done.waited_s < 5 and time.monotonic() - started < 5
    assert "drained in" in done.describe()


def test_the_wait_is_bounded_by_the_grace(drain_redis: PrivateRedis) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(balance.acquire([_target(6)], ttl_s=60, now_s=loop.time()))
    finally:
        loop.close()
    done = drain.drain_wait(6, grace_s=0.5)
    assert done.left == 1 and not done.clean and done.waited_s >= 0.5
    assert "still streaming" in done.describe()


def test_redis_down_does_not_hold_the_stop(settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    done = drain.drain_wait(7, grace_s=30)
    assert done.left is None and done.waited_s < 5

"""Per-user concurrency slots (playground.limits) on a real redis-server of the test's own."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis

from playground.gateway import limits
from tests.support.private_redis import PrivateRedis


@pytest.fixture
def slots_redis(private_redis: PrivateRedis, settings: Any) -> PrivateRedis:
    settings.REDIS_URL = private_redis.url
    return private_redis


async def test_a_burst_gets_exactly_its_limit(slots_redis: PrivateRedis) -> None:
    """32 requests arriving together: 5 slots, 27 refusals."""
    got = await asyncio.gather(
        *(limits.slot_acquire(limits.slot_key(7), limit=5, ttl_s=60) for _ in range(32))
    )
    granted = [slot for slot in got if slot is not None]
    assert len(granted) == 5 and all(slot.enforced for slot in granted)
    clients = redis.Redis.from_url(slots_redis.url).client_list()
    assert "shardboard-gateway-slots" in [c["name"] for c in clients]
    assert redis.Redis.from_url(slots_redis.url).zcard(limits.slot_key(7)) == 5
    await asyncio.gather(*(slot.release() for slot in granted))
    assert redis.Redis.from_url(slots_redis.url).zcard(limits.slot_key(7)) == 0
    assert await limits.slot_acquire(limits.slot_key(7), limit=5, ttl_s=60) is not None


async def test_users_do_not_share_slots(slots_redis: PrivateRedis) -> None:
    first = await limits.slot_acquire(limits.slot_key(1), limit=1, ttl_s=60)
    assert first is not None
    assert await limits.slot_acquire(limits.slot_key(1), limit=1, ttl_s=60) is None
    assert await limits.slot_acquire(limits.slot_key(2), limit=1, ttl_s=60) is not None


async def test_a_slot_never_released_stops_counting_after_its_ttl(
    slots_redis: PrivateRedis,
) -> None:
    assert (
        await limits.slot_acquire(limits.slot_key(3), limit=1, ttl_s=0.2) is not None
    )  # its process crashed
    assert await limits.slot_acquire(limits.slot_key(3), limit=1, ttl_s=0.2) is None
    await asyncio.sleep(0.3)
    assert await limits.slot_acquire(limits.slot_key(3), limit=1, ttl_s=0.2) is not None


async def test_a_redis_that_lost_the_script_gets_it_again(slots_redis: PrivateRedis) -> None:
    assert await limits.slot_acquire(limits.slot_key(4), limit=2, ttl_s=60) is not None
    redis.Redis.from_url(slots_redis.url).script_flush()  # as after a Redis restart
    assert await limits.slot_acquire(limits.slot_key(4), limit=2, ttl_s=60) is not None
    assert await limits.slot_acquire(limits.slot_key(4), limit=2, ttl_s=60) is None


async def test_redis_down_lets_requests_through_unlimited_and_says_so(
    slots_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    slots_redis.stop()
    with caplog.at_level(logging.WARNING, "playground.gateway.limits"):
        got = await asyncio.gather(
            *(limits.slot_acquire(limits.slot_key(5), limit=1, ttl_s=60) for _ in range(3))
        )
        assert all(slot is not None and not slot.enforced for slot in got)
        await got[0].release()  # type: ignore[union-attr]  # nothing to release, no error
    assert "limit not enforced, Redis unavailable" in caplog.text


async def test_a_request_that_goes_away_while_acquiring_gives_its_slot_back(
    slots_redis: PrivateRedis,
) -> None:
    """The acquire was on its way to Redis when the client left: it may have been granted
    there, and is released rather than held until its TTL."""
    first = await limits.slot_acquire(
        limits.slot_key(6), limit=1, ttl_s=60
    )  # connected, script loaded
    assert first is not None
    await first.release()
    task = asyncio.ensure_future(limits.slot_acquire(limits.slot_key(6), limit=1, ttl_s=60))
    await asyncio.sleep(0)  # its command is written; its reply is not read yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)  # the release runs in a task of its own, after the acquire
    assert redis.Redis.from_url(slots_redis.url).zcard(limits.slot_key(6)) == 0

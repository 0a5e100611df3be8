"""The least loaded replica (playground.gateway.balance) on a real redis-server of the test's own."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest
import redis

from playground.gateway import balance, limits
from playground.gateway.upstream import Target
from tests.support.private_redis import PrivateRedis


@pytest.fixture
def counts_redis(private_redis: PrivateRedis, settings: Any) -> PrivateRedis:
    settings.REDIS_URL = private_redis.url
    return private_redis


def replicas(*ids: int) -> list[Target]:
    return [Target(i, "m", "transformers", f"http://127.0.0.1:{9000 + i}", None) for i in ids]


def now_s() -> float:
    return asyncio.get_running_loop().time()


def test_least_loaded_picks_the_smallest_count_and_skips_those_out() -> None:
    assert balance.least_loaded([3, 1, 2]) == 1
    assert balance.least_loaded([3, None, 2]) == 2
    assert balance.least_loaded([None, None]) is None
    assert balance.least_loaded([]) is None
    # Ties: the first from the offset on, so that idle replicas take turns.
    assert balance.least_loaded([0, 0, 0], offset=2) == 2
    assert balance.least_loaded([0, 5, 0], offset=1) == 2
    assert balance.least_loaded([1, 0, 0], offset=0) == 1


async def test_a_burst_spreads_evenly_and_counts_follow_releases(
    counts_redis: PrivateRedis,
) -> None:
    targets = replicas(1, 2, 3)
    leases = [await balance.acquire(targets, ttl_s=60, now_s=now_s()) for _ in range(9)]
    assert Counter(lease.target.deployment_id for lease in leases) == {1: 3, 2: 3, 3: 3}
    assert balance.in_flight([1, 2, 3, 4]) == {1: 3, 2: 3, 3: 3, 4: 0}
    for lease in leases:
        if lease.target.deployment_id == 2:
            await lease.release()
            await lease.release()  # once only
    assert balance.in_flight([1, 2, 3]) == {1: 3, 2: 0, 3: 3}
    nxt = [await balance.acquire(targets, ttl_s=60, now_s=now_s()) for _ in range(3)]
    assert {lease.target.deployment_id for lease in nxt} == {2}  # the idle one takes them all


async def test_concurrent_choices_in_two_clients_do_not_pile_on_one_replica(
    counts_redis: PrivateRedis,
) -> None:
    """Thirty choices at once (the script reads and takes in one step): never more than one
    apart, as two web processes choosing together would be."""
    targets = replicas(5, 6, 7)
    leases = await asyncio.gather(
        *(balance.acquire(targets, ttl_s=60, now_s=now_s()) for _ in range(30))
    )
    assert Counter(lease.target.deployment_id for lease in leases) == {5: 10, 6: 10, 7: 10}


async def test_a_replica_marked_down_gets_nothing_until_the_mark_expires(
    counts_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(balance, "DOWN_S", 0.3)
    targets = replicas(1, 2)
    await balance.mark_down(targets[0], now_s=now_s())
    picked = [await balance.acquire(targets, ttl_s=60, now_s=now_s()) for _ in range(5)]
    assert {lease.target.deployment_id for lease in picked} == {2}
    assert redis.Redis.from_url(counts_redis.url).exists(balance.down_key(1))
    await balance.mark_down(targets[1], now_s=now_s())
    with pytest.raises(balance.NoReplica):
        await balance.acquire(targets, ttl_s=60, now_s=now_s())
    anyway = await balance.acquire(targets, ttl_s=60, now_s=now_s(), skip_down=False)
    assert anyway.target.deployment_id == 1  # the less loaded, marks ignored
    await asyncio.sleep(0.35)
    back = await balance.acquire(targets, ttl_s=60, now_s=now_s())
    assert back.target.deployment_id == 1


async def test_a_count_never_released_stops_counting_after_its_ttl(
    counts_redis: PrivateRedis,
) -> None:
    targets = replicas(1, 2)
    crashed = await balance.acquire(targets[:1], ttl_s=0.2, now_s=now_s())  # process died
    assert crashed.target.deployment_id == 1
    assert (await balance.acquire(targets, ttl_s=60, now_s=now_s())).target.deployment_id == 2
    await asyncio.sleep(0.3)
    assert balance.in_flight([1]) == {1: 0}


async def test_redis_down_counts_in_this_process_and_says_so(
    counts_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    counts_redis.stop()
    targets = replicas(11, 12)
    with caplog.at_level(logging.WARNING, "playground.gateway.balance"):
        leases = [await balance.acquire(targets, ttl_s=60, now_s=now_s()) for _ in range(4)]
        assert Counter(lease.target.deployment_id for lease in leases) == {11: 2, 12: 2}
        await balance.mark_down(targets[0], now_s=now_s())
        nxt = await balance.acquire(targets, ttl_s=60, now_s=now_s())
        assert nxt.target.deployment_id == 12
        for lease in [*leases, nxt]:
            await lease.release()
        assert balance.in_flight([11]) == {11: 0}
    assert "load not shared, Redis unavailable" in caplog.text


async def test_a_shared_prefix_stays_on_one_replica_within_the_bound(
    counts_redis: PrivateRedis,
) -> None:
    targets = replicas(1, 2, 3)
    leases = [await balance.acquire(targets, ttl_s=60, now_s=now_s(), prefix="p") for _ in range(3)]
    homes = Counter(lease.target.deployment_id for lease in leases)
    # ceil(1.25 × 1/3) = 1 then ceil(1.25 × 2/3) = 1 ...: the home takes one, the bound spills.
    assert max(homes.values()) <= 2
    for lease in leases:
        await lease.release()
    one_by_one = []
    for _ in range(5):  # each released before the next: load never binds, the home answers
        lease = await balance.acquire(targets, ttl_s=60, now_s=now_s(), prefix="p")
        one_by_one.append(lease.target.deployment_id)
        await lease.release()
    assert len(set(one_by_one)) == 1
    figures = balance.routing_figures("m")
    assert figures["picks"] == 8 and figures["prefixed"] == 8 and figures["home"] >= 6


async def test_a_draining_replica_gets_no_new_request_even_marked_down_ones_do(
    counts_redis: PrivateRedis,
) -> None:
    from deployments.live import drain

    targets = replicas(1, 2)
    assert drain.drain_begin([1])
    picked = [await balance.acquire(targets, ttl_s=60, now_s=now_s()) for _ in range(4)]
    assert {lease.target.deployment_id for lease in picked} == {2}
    sticky = await balance.acquire(targets, ttl_s=60, now_s=now_s(), prefix="x")
    assert sticky.target.deployment_id == 2
    with pytest.raises(balance.NoReplica):
        await balance.acquire(targets[:1], ttl_s=60, now_s=now_s(), skip_down=False)
    drain.drain_end([1])
    back = await balance.acquire(targets[:1], ttl_s=60, now_s=now_s())
    assert back.target.deployment_id == 1


async def test_a_lease_and_its_slot_are_given_back_together(counts_redis: PrivateRedis) -> None:
    key = limits.slot_key(41)
    slot = await limits.slot_acquire(key, limit=1, ttl_s=60)
    lease = await balance.acquire(replicas(7), ttl_s=60, now_s=now_s())
    assert slot is not None and balance.in_flight([7]) == {7: 1}
    assert await limits.slot_acquire(key, limit=1, ttl_s=60) is None  # the one slot is held
    await balance.release_with_slot(lease, slot)
    await balance.release_with_slot(lease, slot)  # the count once only
    assert balance.in_flight([7]) == {7: 0}
    again = await limits.slot_acquire(key, limit=1, ttl_s=60)
    assert again is not None
    await again.release()

"""Which replica of a name answers: the healthy one with the fewest requests in flight.

The requests in flight are counted in Redis, per replica, across every web process: a
replica's count is a sorted set of request ids scored by their expiry time (as the per-user
slots of playground.gateway.limits), so a count that a crashed process never gave back stops
counting after PLAYGROUND_STREAM_MAX_S instead of skewing the choice for ever. One script
reads every candidate's count and takes the least loaded one's slot in one round trip, so two
processes choosing at once do not both see the same idle replica.

A replica is healthy when the database says it runs (read at most ROTATION_S ago) and no web
process saw its engine refuse or drop a connection in the last DOWN_S: a dead engine leaves
the rotation at the first failure any process sees, and for good once the watchdog (every
second) has marked it failed or restarting. It comes back when it runs again.

Redis unavailable: the counts of this process alone decide (logged), as the per-user slots do.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import NoScriptError, RedisError

from controlpanel import redisconn
from playground.gateway.limits import _client
from playground.gateway.upstream import Target

logger = logging.getLogger(__name__)

ROTATION_S = 1.0  # how old the list of a name's running replicas may be
DOWN_S = 2.0  # how long a replica whose engine refused a connection stays out

_PICK = """
local n = tonumber(ARGV[1])
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1000000
local best, best_count = 0, -1
for k = 0, n - 1 do
  local i = (k + tonumber(ARGV[4])) % n + 1
  if ARGV[5] == '0' or redis.call('EXISTS', KEYS[n + i]) == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_s)
    local c = redis.call('ZCARD', KEYS[i])
    if best_count < 0 or c < best_count then best, best_count = i, c end
  end
end
if best == 0 then return 0 end
redis.call('ZADD', KEYS[best], now_s + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[best], math.ceil(tonumber(ARGV[2])) + 1)
return best
"""
_PICK_SHA = hashlib.sha1(_PICK.encode(), usedforsecurity=False).hexdigest()

# This process's own counts and down marks: what decides while Redis does not answer.
_local_counts: Counter[int] = Counter()
_local_down: dict[int, float] = {}


def inflight_key(deployment_id: int) -> str:
    return f"shardboard:gateway:inflight:{deployment_id}"


def down_key(deployment_id: int) -> str:
    return f"shardboard:gateway:down:{deployment_id}"


class NoReplica(Exception):
    """Every running replica of the name was seen failing in the last DOWN_S."""


@dataclass(slots=True)
class Lease:
    """A request in flight on one replica; released once, however the request ends."""

    target: Target
    member: str
    shared: bool
    released: bool = False

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        if not self.shared:
            _local_counts[self.target.deployment_id] -= 1
            return
        try:
            await _client().zrem(inflight_key(self.target.deployment_id), self.member)
        except (RedisError, TimeoutError) as exc:
            logger.warning("in-flight count of replica not released (expires): %s", exc)


def least_loaded(counts: Sequence[int | None], offset: int = 0) -> int | None:
    """The index of the smallest count (None: out of rotation), ties broken by rotating from
    `offset` so that idle replicas share the load; None when every one is out."""
    n = len(counts)
    best: int | None = None
    for k in range(n):
        i = (k + offset) % n
        c = counts[i]
        if c is not None and (best is None or c < (counts[best] or 0)):
            best = i
    return best


async def acquire(
    replicas: Sequence[Target], *, ttl_s: float, now_s: float, skip_down: bool = True
) -> Lease:
    """A slot on the least loaded healthy replica (`skip_down` False: also counting those
    marked down); raises NoReplica. `now_s`: the event loop's clock."""
    if not replicas:
        raise NoReplica
    member = os.urandom(8).hex()
    offset = secrets.randbelow(len(replicas))
    keys = [inflight_key(t.deployment_id) for t in replicas]
    keys += [down_key(t.deployment_id) for t in replicas]
    args: list[str | int | float] = [
        len(replicas),
        ttl_s,
        member,
        offset,
        "1" if skip_down else "0",
    ]
    # In a task of its own (see limits.slot_acquire): a caller that goes away gives it back.
    picking = asyncio.ensure_future(_pick(keys, args))
    try:
        picked = await asyncio.shield(picking)
    except asyncio.CancelledError:
        picking.add_done_callback(lambda done: _give_back(done, keys, member))
        raise
    except (RedisError, TimeoutError) as exc:
        logger.warning("replica load not shared, Redis unavailable: %s", exc)
        return _acquire_local(replicas, offset, now_s if skip_down else 0.0, member)
    if not picked:
        raise NoReplica
    return Lease(replicas[picked - 1], member, shared=True)


async def _pick(keys: list[str], args: list[str | int | float]) -> int:
    client = _client()
    try:
        return int(await client.evalsha(_PICK_SHA, len(keys), *keys, *args))
    except NoScriptError:  # first use, or Redis restarted
        await client.script_load(_PICK)
        return int(await client.evalsha(_PICK_SHA, len(keys), *keys, *args))


def _give_back(picking: asyncio.Future[int], keys: list[str], member: str) -> None:
    if picking.cancelled() or picking.exception() is not None or not picking.result():
        return
    key = keys[picking.result() - 1]
    asyncio.ensure_future(_client().zrem(key, member)).add_done_callback(_logged)


def _logged(task: asyncio.Future[int]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("in-flight count not released (expires): %s", task.exception())


def _acquire_local(replicas: Sequence[Target], offset: int, now_s: float, member: str) -> Lease:
    counts = [
        None if _local_down.get(t.deployment_id, 0.0) > now_s else _local_counts[t.deployment_id]
        for t in replicas
    ]
    index = least_loaded(counts, offset)
    if index is None:
        raise NoReplica
    target = replicas[index]
    _local_counts[target.deployment_id] += 1
    return Lease(target, member, shared=False)


async def mark_down(target: Target, *, now_s: float) -> None:
    """Out of the rotation of every web process for DOWN_S: its engine failed a connection."""
    _local_down[target.deployment_id] = now_s + DOWN_S
    try:
        await _client().set(down_key(target.deployment_id), "1", px=int(DOWN_S * 1000))
    except (RedisError, TimeoutError) as exc:
        logger.warning("replica down mark not shared, Redis unavailable: %s", exc)


def in_flight(deployment_ids: Sequence[int]) -> dict[int, int]:
    """The requests in flight per replica right now, for the pages (sync Redis; 0 when
    Redis does not answer)."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        pipe = client.pipeline(transaction=False)
        now_s = time.time()
        for pk in deployment_ids:
            pipe.zcount(inflight_key(pk), now_s, "+inf")
        return {pk: int(c) for pk, c in zip(deployment_ids, pipe.execute(), strict=True)}
    except (RedisError, OSError) as exc:
        logger.warning("in-flight counts unavailable: %s", exc)
        return dict.fromkeys(deployment_ids, 0)
    finally:
        client.close()

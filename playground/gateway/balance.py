"""Which replica of a name answers: the prompt prefix's replica unless its load passes the
bound over the average (playground.gateway.routing), else the one with the fewest in flight.

The requests in flight are counted in Redis, per replica, across every web process: a
replica's count is a sorted set of request ids scored by their expiry time (as the per-user
slots of playground.gateway.limits), so a count that a crashed process never gave back stops
counting after PLAYGROUND_STREAM_MAX_S instead of skewing the choice for ever. One script
reads every candidate's count and takes the least loaded one's slot in one round trip, so two
processes choosing at once do not both see the same idle replica.

A replica is healthy when the database says it runs (read at most ROTATION_S ago) and no web
process saw its engine refuse or drop a connection in the last DOWN_S, and it is not draining
(deployments.live.drain: a stop or scale-down took it out): a dead engine leaves
the rotation at the first failure any process sees, and for good once the watchdog (every
second) has marked it failed or restarting. It comes back when it runs again.

Redis unavailable: the counts of this process alone decide (logged), as the per-user slots do.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import NoScriptError, RedisError

from controlpanel import redisconn
from deployments.live.drain import drain_key, inflight_key
from playground.gateway import routing
from playground.gateway.limits import Slot, _client
from playground.gateway.upstream import Target

logger = logging.getLogger(__name__)

ROTATION_S = 1.0  # how old the list of a name's running replicas may be
DOWN_S = 2.0  # how long a replica whose engine refused a connection stays out

# KEYS: n in-flight sets, n down marks, n drain marks, the name's routing figures (a hash).
# ARGV: n, ttl_s, member, skip_down, load factor (0: no prefix), then the prefix's preference
# order (n 1-based indices). routing.choose is this rule in Python. Ties among the least loaded
# rotate with the name's pick counter, shared by every web process: idle replicas take turns
# (a random offset sent all four of a test's sequential requests to one replica, 1 run in 8).
_PICK = """
local n = tonumber(ARGV[1])
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1000000
local counts, total, m = {}, 0, 0
for i = 1, n do
  local out = redis.call('EXISTS', KEYS[2 * n + i]) == 1
  if not out and ARGV[4] == '1' then out = redis.call('EXISTS', KEYS[n + i]) == 1 end
  if not out then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_s)
    counts[i] = redis.call('ZCARD', KEYS[i])
    total, m = total + counts[i], m + 1
  end
end
if m == 0 then return {0, 0} end
local best, home = 0, 0
local factor = tonumber(ARGV[5])
if factor > 0 then
  local bound = math.max(1, math.ceil(factor * (total + 1) / m))
  for k = 1, n do
    local i = tonumber(ARGV[5 + k])
    if counts[i] ~= nil then
      if home == 0 then home = i end
      if counts[i] + 1 <= bound then best = i break end
    end
  end
end
if best == 0 then
  local best_count = -1
  local offset = tonumber(redis.call('HGET', KEYS[3 * n + 1], 'picks') or '0')
  for k = 0, n - 1 do
    local i = (k + offset) % n + 1
    if counts[i] ~= nil and (best_count < 0 or counts[i] < best_count) then
      best, best_count = i, counts[i]
    end
  end
end
redis.call('ZADD', KEYS[best], now_s + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[best], math.ceil(tonumber(ARGV[2])) + 1)
local hit = 0
if factor > 0 then
  redis.call('HINCRBY', KEYS[3 * n + 1], 'prefixed', 1)
  if best == home then hit = 1 redis.call('HINCRBY', KEYS[3 * n + 1], 'home', 1) end
end
redis.call('HINCRBY', KEYS[3 * n + 1], 'picks', 1)
return {best, hit}
"""
_PICK_SHA = hashlib.sha1(_PICK.encode(), usedforsecurity=False).hexdigest()

# This process's own counts and down marks: what decides while Redis does not answer.
_local_counts: Counter[int] = Counter()
_local_down: dict[int, float] = {}
_local_picks = itertools.count()  # this process's tie rotation

__all__ = ["Lease", "NoReplica", "acquire", "inflight_key", "mark_down", "routing_figures"]


def figures_key(name: str) -> str:
    return f"shardboard:gateway:routing:{name}"


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


async def release_with_slot(lease: Lease, slot: Slot) -> None:
    """The replica's count and the caller's concurrency slot given back in one pipeline: one
    write to Redis and one round trip, not two of each (each write was a system call that
    showed in the gateway's profile: docs/performance.md)."""
    if lease.released or not lease.shared or not slot.enforced:
        await lease.release()
        await slot.release()
        return
    lease.released = True
    try:
        async with _client().pipeline(transaction=False) as pipe:
            pipe.zrem(inflight_key(lease.target.deployment_id), lease.member)
            pipe.zrem(slot.key, slot.member)
            await pipe.execute()
    except (RedisError, TimeoutError):
        # redis-py retries a lone command on a pooled connection Redis closed (a restart), not a
        # pipeline: each one alone then, with its own retry and its own warning if it fails too.
        lease.released = False
        await lease.release()
        await slot.release()


def least_loaded(counts: Sequence[int | None], offset: int = 0) -> int | None:
    """The index of the smallest count (None: out of rotation), ties broken by rotating from
    `offset` so that idle replicas share the load; None when every one is out."""
    choice = routing.choose(counts, None, offset=offset)
    return None if choice is None else choice.index


async def acquire(
    replicas: Sequence[Target],
    *,
    ttl_s: float,
    now_s: float,
    skip_down: bool = True,
    prefix: str = "",
    factor: float = routing.LOAD_FACTOR,
) -> Lease:
    """A slot on the replica `prefix` (routing.prefix_key; empty: none) prefers within the
    load bound (c = `factor`, 0: no affinity), else on the least loaded, among the healthy ones (`skip_down` False: also
    those marked down; draining ones never); raises NoReplica. `now_s`: the loop's clock."""
    if not replicas:
        raise NoReplica
    member = os.urandom(8).hex()
    ids = [t.deployment_id for t in replicas]
    keys = [inflight_key(pk) for pk in ids] + [down_key(pk) for pk in ids]
    keys += [drain_key(pk) for pk in ids] + [figures_key(replicas[0].name)]
    order = routing.preference(prefix, ids) if prefix and factor > 0 else None
    args: list[str | int | float] = [
        len(replicas),
        ttl_s,
        member,
        "1" if skip_down else "0",
        factor if order is not None else 0,
        *[i + 1 for i in (order or range(len(replicas)))],
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
        local_now_s = now_s if skip_down else 0.0
        return _acquire_local(replicas, local_now_s, member, order, factor)
    if not picked:
        raise NoReplica
    return Lease(replicas[picked - 1], member, shared=True)


async def _pick(keys: list[str], args: list[str | int | float]) -> int:
    """The 1-based index picked (0: none)."""
    client = _client()
    try:
        answer = await client.evalsha(_PICK_SHA, len(keys), *keys, *args)
    except NoScriptError:  # first use, or Redis restarted
        await client.script_load(_PICK)
        answer = await client.evalsha(_PICK_SHA, len(keys), *keys, *args)
    return int(answer[0])


def _give_back(picking: asyncio.Future[int], keys: list[str], member: str) -> None:
    if picking.cancelled() or picking.exception() is not None or not picking.result():
        return
    key = keys[picking.result() - 1]
    asyncio.ensure_future(_client().zrem(key, member)).add_done_callback(_logged)


def _logged(task: asyncio.Future[int]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("in-flight count not released (expires): %s", task.exception())


def _acquire_local(
    replicas: Sequence[Target],
    now_s: float,
    member: str,
    order: Sequence[int] | None,
    factor: float,
) -> Lease:
    counts = [
        None if _local_down.get(t.deployment_id, 0.0) > now_s else _local_counts[t.deployment_id]
        for t in replicas
    ]
    choice = routing.choose(counts, order, factor=factor, offset=next(_local_picks))
    if choice is None:
        raise NoReplica
    target = replicas[choice.index]
    _local_counts[target.deployment_id] += 1
    return Lease(target, member, shared=False)


async def mark_down(target: Target, *, now_s: float) -> None:
    """Out of the rotation of every web process for DOWN_S: its engine failed a connection."""
    _local_down[target.deployment_id] = now_s + DOWN_S
    try:
        await _client().set(down_key(target.deployment_id), "1", px=int(DOWN_S * 1000))
    except (RedisError, TimeoutError) as exc:
        logger.warning("replica down mark not shared, Redis unavailable: %s", exc)


def routing_figures(name: str) -> dict[str, int]:
    """Since the counters began: `picks`, those with a prompt prefix (`prefixed`) and those
    that went to the prefix's own replica (`home`): what a scaling controller or a page reads
    for the affinity hit rate. Empty when Redis does not answer."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        raw = client.hgetall(figures_key(name))
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
    except (RedisError, OSError) as exc:
        logger.warning("routing figures unavailable: %s", exc)
        return {}
    finally:
        client.close()


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

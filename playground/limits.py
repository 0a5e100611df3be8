"""Per-user concurrency slots in Redis, shared by every web process.

A slot is a member of a sorted set scored by its expiry time, so a slot that a crashed process
never released stops counting once it expires (TTL safety), without a periodic sweeper.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from dataclasses import dataclass

import redis.asyncio as aioredis
from django.conf import settings
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)
REDIS_TIMEOUT_S = 1.0

_ACQUIRE = """
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_s)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now_s + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return 1
"""

_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[aioredis.Redis, AsyncScript]
] = weakref.WeakKeyDictionary()


def _redis_and_script() -> tuple[aioredis.Redis, AsyncScript]:
    loop = asyncio.get_running_loop()
    pair = _clients.get(loop)
    if pair is None:
        # No socket_timeout: redis-py would start a task per command for it (asyncio.wait_for);
        # the calls below are bounded by one asyncio.timeout each instead.
        client = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.5)
        pair = (client, client.register_script(_ACQUIRE))  # EVALSHA: the script is sent once
        _clients[loop] = pair
    return pair


def _redis() -> aioredis.Redis:
    return _redis_and_script()[0]


def slot_key(user_id: int) -> str:
    return f"shardboard:playground:slots:{user_id}"


@dataclass(frozen=True, slots=True)
class Slot:
    key: str
    member: str
    enforced: bool

    async def release(self) -> None:
        if not self.enforced:
            return
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                await _redis().zrem(self.key, self.member)
        except (RedisError, TimeoutError) as exc:
            logger.warning("playground slot %s not released (expires by TTL): %s", self.key, exc)


async def slot_acquire(user_id: int, *, limit: int, ttl_s: float) -> Slot | None:
    """A slot, or None when the user already holds `limit` of them.

    Redis down: the request goes ahead unlimited (logged), as the rest of the panel does.
    """
    key, member = slot_key(user_id), os.urandom(8).hex()
    try:
        async with asyncio.timeout(REDIS_TIMEOUT_S):
            granted = await _redis_and_script()[1](keys=[key], args=[limit, ttl_s, member])
    except (RedisError, TimeoutError) as exc:
        logger.warning("playground concurrency limit not enforced, Redis unavailable: %s", exc)
        return Slot(key, member, enforced=False)
    return Slot(key, member, enforced=True) if granted == 1 else None

"""Concurrency slots in Redis, shared by every web process: per user for the browser, per API
token for a token (its own limit, so an application behind one token is not held to a person's).

A slot is a member of a sorted set scored by its expiry time, so a slot that a crashed process
never released stops counting once it expires (TTL safety), without a periodic sweeper.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import weakref
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError, RedisError

from controlpanel import redisconn

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


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
    weakref.WeakKeyDictionary()
)
_SCRIPT_SHA = hashlib.sha1(_ACQUIRE.encode(), usedforsecurity=False).hexdigest()


def _client() -> redis.asyncio.Redis:
    """This event loop's redis-py client (its own connection pool: a command waits for no
    other)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = redisconn.async_client(
            connect_timeout_s=0.5, timeout_s=REDIS_TIMEOUT_S, name="shardboard-gateway-slots"
        )
    return client


async def _acquire(key: str, limit: int, ttl_s: float, member: str) -> Any:
    client = _client()
    try:
        return await client.evalsha(_SCRIPT_SHA, 1, key, limit, ttl_s, member)
    except NoScriptError:  # first use, or Redis restarted
        await client.script_load(_ACQUIRE)
        return await client.evalsha(_SCRIPT_SHA, 1, key, limit, ttl_s, member)


def _release_if_granted(acquiring: asyncio.Future[Any], key: str, member: str) -> None:
    """Once an acquire whose caller went away is answered: its slot given back if granted."""
    if not acquiring.cancelled() and acquiring.exception() is None and acquiring.result() == 1:
        asyncio.ensure_future(_client().zrem(key, member)).add_done_callback(_logged)


def _logged(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("playground slot not released (expires by TTL): %s", task.exception())


def slot_key(user_id: int) -> str:
    return f"shardboard:playground:slots:{user_id}"


def token_slot_key(bearer_id: str) -> str:
    return f"shardboard:gateway:token-slots:{bearer_id}"


def concurrency_of(
    *, user_id: int, bearer_id: str, token_limit: int | None, default: int, ceiling: int
) -> tuple[str, int]:
    """The slots a request counts against and their limit: the token's own (its limit, else
    the default, never past the admin's ceiling, which may have dropped since it was set), or
    the user's for a session."""
    if not bearer_id:
        return slot_key(user_id), default
    return token_slot_key(bearer_id), min(token_limit or default, ceiling)


@dataclass(frozen=True, slots=True)
class Slot:
    key: str
    member: str
    enforced: bool

    async def release(self) -> None:
        if not self.enforced:
            return
        try:
            await _client().zrem(self.key, self.member)  # bounded by REDIS_TIMEOUT_S
        except (RedisError, TimeoutError) as exc:
            logger.warning("playground slot %s not released (expires by TTL): %s", self.key, exc)


async def slot_acquire(key: str, *, limit: int, ttl_s: float) -> Slot | None:
    """A slot under `key` (slot_key, token_slot_key), or None when `limit` are already held.

    Redis down: the request goes ahead unlimited (logged), as the rest of the panel does.
    """
    member = os.urandom(8).hex()
    # In a task of its own: redis-py finishes a command already sent even when its caller is
    # cancelled, and the caller (a client that went away) must not wait for it.
    acquiring = asyncio.ensure_future(_acquire(key, limit, ttl_s, member))
    try:
        granted = await asyncio.shield(acquiring)  # bounded by REDIS_TIMEOUT_S
    except asyncio.CancelledError:  # the client went away; the slot may be granted meanwhile
        acquiring.add_done_callback(lambda done: _release_if_granted(done, key, member))
        raise
    except (RedisError, TimeoutError) as exc:
        logger.warning("playground concurrency limit not enforced, Redis unavailable: %s", exc)
        return Slot(key, member, enforced=False)
    return Slot(key, member, enforced=True) if granted == 1 else None

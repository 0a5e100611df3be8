"""Per-user concurrency slots in Redis, shared by every web process.

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

from django.conf import settings
from redis.exceptions import NoScriptError, RedisError

from playground.gateway.redis_link import RedisLink

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


_links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RedisLink] = (
    weakref.WeakKeyDictionary()
)
_SCRIPT_SHA = hashlib.sha1(_ACQUIRE.encode(), usedforsecurity=False).hexdigest()


def _link() -> RedisLink:
    """This event loop's pipelined Redis connection (playground.gateway.redis_link): the slot
    commands of a loop turn go out together, over one connection."""
    loop = asyncio.get_running_loop()
    link = _links.get(loop)
    if link is None:
        link = _links[loop] = RedisLink(
            settings.REDIS_URL,
            timeout_s=REDIS_TIMEOUT_S,
            connect_timeout_s=0.5,
            name="shardboard-gateway-slots",
        )
    return link


async def _acquire(key: str, limit: int, ttl_s: float, member: str) -> Any:
    link = _link()
    command = ("EVALSHA", _SCRIPT_SHA, 1, key, limit, ttl_s, member)
    try:
        return await link.send(*command)
    except NoScriptError:  # first use, or Redis restarted
        await link.send("SCRIPT", "LOAD", _ACQUIRE)
        return await link.send(*command)


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
            await _link().send("ZREM", self.key, self.member)  # bounded by REDIS_TIMEOUT_S
        except (RedisError, TimeoutError) as exc:
            logger.warning("playground slot %s not released (expires by TTL): %s", self.key, exc)


async def slot_acquire(user_id: int, *, limit: int, ttl_s: float) -> Slot | None:
    """A slot, or None when the user already holds `limit` of them.

    Redis down: the request goes ahead unlimited (logged), as the rest of the panel does.
    """
    key, member = slot_key(user_id), os.urandom(8).hex()
    try:
        granted = await _acquire(key, limit, ttl_s, member)  # bounded by REDIS_TIMEOUT_S
    except asyncio.CancelledError:  # the client went away; the slot may have been granted
        _link().send_if_connected("ZREM", key, member)
        raise
    except (RedisError, TimeoutError) as exc:
        logger.warning("playground concurrency limit not enforced, Redis unavailable: %s", exc)
        return Slot(key, member, enforced=False)
    return Slot(key, member, enforced=True) if granted == 1 else None

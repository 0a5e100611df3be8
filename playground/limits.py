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

import redis.asyncio as aioredis
from django.conf import settings
from redis.exceptions import NoScriptError, RedisError

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


class _Batcher:
    """The slot commands of one event loop, sent in batches: every command issued during one
    turn of the loop goes out with the others in one pipeline (one write, one read).

    A burst of requests arriving together is handled in one loop turn; one round trip and one
    connection per command was about a quarter of the gateway's CPU per request (redis-py's
    pool takes a lock and checks the socket for each; bench/proxy_overhead.py, cProfile).
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        # No socket_timeout: redis-py would start a task per command for it (asyncio.wait_for);
        # each batch is bounded by one asyncio.timeout instead.
        self.client = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.5)
        self._script_sha = hashlib.sha1(_ACQUIRE.encode(), usedforsecurity=False).hexdigest()
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def acquire(self, key: str, limit: int, ttl_s: float, member: str) -> asyncio.Future[Any]:
        return self._queue(("EVALSHA", self._script_sha, 1, key, limit, ttl_s, member))

    def release(self, key: str, member: str) -> asyncio.Future[Any]:
        return self._queue(("ZREM", key, member))

    def _queue(self, command: tuple[Any, ...]) -> asyncio.Future[Any]:
        future = self._loop.create_future()
        if not self._pending:
            self._loop.call_soon(self._flush)  # after everything else of this loop turn
        self._pending.append((command, future))
        return future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = self._loop.create_task(self._send(batch))
        self._tasks.add(task)  # a reference: the loop keeps only weak ones
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        commands = [command for command, _ in batch]
        try:
            async with asyncio.timeout(REDIS_TIMEOUT_S):
                results = await self._execute(commands)
                if any(isinstance(result, NoScriptError) for result in results):
                    await self.client.script_load(_ACQUIRE)  # first use, or Redis restarted
                    results = await self._execute(commands)
        except asyncio.CancelledError:  # the loop is stopping
            _settle(batch, [RedisError("cancelled while waiting for Redis")] * len(batch))
            raise
        except Exception as exc:  # Redis down or slow: every waiter gets the error
            results = [exc] * len(batch)
        _settle(batch, results)

    async def _execute(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        async with self.client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return await pipe.execute(raise_on_error=False)


def _settle(batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]], results: list[Any]) -> None:
    for (_, future), result in zip(batch, results, strict=True):
        if future.done():
            continue  # its caller timed out or went away
        if isinstance(result, Exception):
            future.set_exception(result)
        else:
            future.set_result(result)


_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
    weakref.WeakKeyDictionary()
)


def _batcher() -> _Batcher:
    loop = asyncio.get_running_loop()
    batcher = _batchers.get(loop)
    if batcher is None:
        batcher = _batchers[loop] = _Batcher()
    return batcher


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
            await _batcher().release(self.key, self.member)  # bounded by the batch's timeout
        except (RedisError, TimeoutError) as exc:
            logger.warning("playground slot %s not released (expires by TTL): %s", self.key, exc)


async def slot_acquire(user_id: int, *, limit: int, ttl_s: float) -> Slot | None:
    """A slot, or None when the user already holds `limit` of them.

    Redis down: the request goes ahead unlimited (logged), as the rest of the panel does.
    """
    key, member = slot_key(user_id), os.urandom(8).hex()
    try:
        granted = await _batcher().acquire(key, limit, ttl_s, member)  # bounded, as above
    except (RedisError, TimeoutError) as exc:
        logger.warning("playground concurrency limit not enforced, Redis unavailable: %s", exc)
        return Slot(key, member, enforced=False)
    return Slot(key, member, enforced=True) if granted == 1 else None

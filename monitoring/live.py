"""Process-local fan-out of live GPU samples: one Redis subscription per stream and process.

The host worker encodes each sample once and PUBLISHes the text on two Redis pub/sub
channels: its host's stream and the all-hosts stream (``stream(host)``, ``stream(None)``).
Each ASGI process keeps one ``LiveHub`` per event loop, holding ONE pub/sub connection
subscribed to the streams its websockets watch, and hands every message to those local
subscribers in memory, rather than one channel-layer message per browser, which
channels_redis pops with sequential round trips each: a sample's delay would grow with the
number of browsers (docs/performance.md).

Every ASGI process subscribes for itself, so any number of them can serve the page. When
Redis goes away the hub reconnects with backoff and subscribes to every stream again;
samples published meanwhile are lost (pub/sub is delivery, the history stream is the state:
a reconnecting browser gets its backfill). A stream is unsubscribed when its last local
subscriber leaves, and the connection is closed when no subscriber is left.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from functools import cache
from typing import Any, Protocol

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.connection import parse_url

from controlpanel import redisconn
from monitoring.history import KEY_PREFIX, sanitize_host

log = logging.getLogger(__name__)

LIVE_PREFIX = f"{KEY_PREFIX}:live"
RETRY_MIN_S = 0.25
RETRY_MAX_S = 5.0
CLOSE_TIMEOUT_S = 2.0
POLL_S = 5.0  # how long one read waits before health checks get a turn


def stream(host: str | None) -> str:
    """The pub/sub channel of one host's samples, or of every host's (``None``).

    Pub/sub channels are global to a Redis server, not per database, so the name carries the
    database number: two installations on one server with their own databases stay apart."""
    prefix = f"{LIVE_PREFIX}:{_redis_db()}"
    return f"{prefix}:host:{sanitize_host(host)}" if host else f"{prefix}:all"


@cache
def _db_of(url: str) -> int:
    return int(parse_url(url).get("db", 0))  # type: ignore[no-untyped-call]  # redis-py leaves it untyped


def _redis_db() -> int:
    return _db_of(settings.REDIS_URL)


def publish(client: redis.Redis, host: str, text: str) -> None:
    """Send one encoded message to the host's stream and the all-hosts stream (one round trip)."""
    pipe = client.pipeline(transaction=False)
    pipe.publish(stream(host), text)
    pipe.publish(stream(None), text)
    pipe.execute()


class Subscriber(Protocol):
    async def deliver(self, text: str) -> None: ...


class LiveHub:
    """The fan-out of one event loop; ``join``/``leave`` from the websocket consumers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.subscribers: dict[str, set[Subscriber]] = {}
        self.connects = 0
        self._lock = asyncio.Lock()
        self._pubsub: Any = None  # redis.asyncio PubSub while connected
        self._task: asyncio.Task[None] | None = None
        self._lost = False  # the connection broke and has not been made again yet

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def join(self, name: str, subscriber: Subscriber) -> None:
        """Subscribed before it returns (when Redis answers): nothing published later is missed."""
        async with self._lock:
            subscribers = self.subscribers.setdefault(name, set())
            first = not subscribers
            subscribers.add(subscriber)
            if self.running:
                if first and self._pubsub is not None:
                    await self._command("SUBSCRIBE", self._pubsub.subscribe, name)
                return
            connection = None
            try:
                connection = await self._open()
            except (redis.RedisError, OSError) as exc:  # the reader keeps trying
                self._lost = True
                log.warning("live GPU samples: cannot subscribe yet (%s)", exc)
            self._task = asyncio.get_running_loop().create_task(
                self._run(connection), name="gpu-live-hub"
            )

    def leave(self, name: str, subscriber: Subscriber) -> None:
        """Synchronous, so that it also runs from a cancelled consumer; idempotent."""
        subscribers = self.subscribers.get(name)
        if subscribers is None or subscriber not in subscribers:
            return
        subscribers.discard(subscriber)
        if not subscribers:
            del self.subscribers[name]
            asyncio.get_running_loop().create_task(self._drop(name), name="gpu-live-unsubscribe")

    async def _drop(self, name: str) -> None:
        async with self._lock:
            if name in self.subscribers:
                return  # someone joined again meanwhile
            if not self.subscribers and self._task is not None:
                self._task.cancel()  # closes the connection, which unsubscribes everything
                self._task = None
            elif self._pubsub is not None:
                await self._command("UNSUBSCRIBE", self._pubsub.unsubscribe, name)

    async def _command(self, what: str, command: Any, *names: str) -> None:
        try:
            await command(*names)
        except (redis.RedisError, OSError) as exc:  # the reader sees the broken connection too
            log.warning("live GPU samples: %s %s failed (%s)", what, names, exc)

    async def _connect(self) -> tuple[aioredis.Redis, Any] | None:
        async with self._lock:
            return await self._open() if self.subscribers else None

    async def _open(self) -> tuple[aioredis.Redis, Any]:
        """A new connection subscribed to every stream wanted now (the caller holds the lock)."""
        client = redisconn.async_client(
            url=self.url, connect_timeout_s=2, keepalive=True, health_check_s=15
        )
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*self.subscribers)
        except BaseException:
            await _close(client, pubsub)
            raise
        self._pubsub = pubsub
        self.connects += 1
        if self._lost:  # not after an idle close (the last page left): only after a failure
            self._lost = False
            log.info("live GPU samples: subscribed to %d stream(s) again", len(self.subscribers))
        return client, pubsub

    async def _run(self, connection: tuple[aioredis.Redis, Any] | None) -> None:
        delay = RETRY_MIN_S
        while True:
            try:
                if connection is None:
                    connection = await self._connect()
                if connection is None:
                    return
                delay = RETRY_MIN_S
                await self._read(connection[1])
            except (redis.RedisError, OSError) as exc:
                self._lost = True
                log.warning(
                    "live GPU samples: Redis connection lost (%s); retrying in %.2f s", exc, delay
                )
            finally:
                if connection is not None:
                    if self._pubsub is connection[1]:
                        self._pubsub = None
                    await _close(*connection)
                    connection = None
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)

    async def _read(self, pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=POLL_S)
            if message is not None and message.get("type") == "message":
                await self._deliver(message["channel"], message["data"])

    async def _deliver(self, channel: bytes | str, data: bytes | str) -> None:
        name = channel.decode() if isinstance(channel, bytes) else channel
        text = data.decode() if isinstance(data, bytes) else data
        for subscriber in list(self.subscribers.get(name, ())):
            try:
                await subscriber.deliver(text)
            except Exception as exc:  # a socket closed before its consumer heard of it
                log.debug("live GPU samples: dropping %r (%s: %s)", subscriber, type(exc), exc)
                self.leave(name, subscriber)


async def _close(client: aioredis.Redis, pubsub: Any) -> None:
    """Bounded: it also runs in a cancelled reader (an event loop shutting down), where a close
    that waits on a connection interrupted mid-read must not hold the loop's shutdown up."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await pubsub.aclose()
            await client.aclose()
    except (redis.RedisError, OSError, TimeoutError) as exc:
        log.debug("live GPU samples: closing the connection: %r", exc)


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LiveHub] = weakref.WeakKeyDictionary()


def hub() -> LiveHub:
    """This event loop's hub (one per ASGI process; tests may run several loops)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = LiveHub(settings.REDIS_URL)
    return found

"""The one place Redis clients are built: from ``settings.REDIS_URL`` (or a URL the caller holds),
with the timeouts each use states.

Each caller names its own timeouts because the uses differ: a page's check must fail in half a
second (connect), a stream read may wait seconds (socket), the gateway's slots wait for no pool
and the log shipper must not retry. This module keeps the construction, and redis-py's defaults
where a caller says nothing, in one file.
Not named ``redis``: that would shadow the package for ``controlpanel``'s own modules.

Retries: a client from a URL gets none from redis-py (its constructor's default is ten with
backoff, from_url's is none), and the asyncio pool hands out a pooled connection that Redis
closed by restarting, so the next command on it failed although Redis was back: the gateway's
slots went unenforced for the first stream after a restart. Every client here redials on a
connection error once, at once; a timeout is not retried (each caller's timeout is its bound),
and ``one_try`` callers get no second try.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.retry
import redis.retry
from django.conf import settings
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

# A connection error is one try lost on a dead connection, or Redis refusing at once (down).
_REDIAL = (RedisConnectionError,)


def client(
    *,
    connect_timeout_s: float,
    timeout_s: float | None = None,
    one_try: bool = False,
    url: str | None = None,
) -> redis.Redis:
    """A sync client (thread-safe, its own pool). ``timeout_s`` bounds each command (None:
    wait); ``one_try``: not even the redial, for callers that drop the work anyway when Redis
    does not answer."""
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout_s,
        "retry": redis.retry.Retry(NoBackoff(), 0 if one_try else 1, _REDIAL),
    }
    if timeout_s is not None:
        options["socket_timeout"] = timeout_s
    return redis.Redis.from_url(url or settings.REDIS_URL, **options)


def async_client(
    *,
    connect_timeout_s: float,
    timeout_s: float | None = None,
    name: str | None = None,
    keepalive: bool = False,
    health_check_s: int = 0,
    url: str | None = None,
) -> aioredis.Redis:
    """An asyncio client, bound to the event loop that first uses it. ``keepalive`` and
    ``health_check_s`` are for long-lived subscriptions, which must notice a dead peer."""
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout_s,
        "retry": redis.asyncio.retry.Retry(NoBackoff(), 1, _REDIAL),
    }
    if timeout_s is not None:
        options["socket_timeout"] = timeout_s
    if name is not None:
        options["client_name"] = name
    if keepalive:
        options["socket_keepalive"] = True
    if health_check_s:
        options["health_check_interval"] = health_check_s
    return aioredis.Redis.from_url(url or settings.REDIS_URL, **options)

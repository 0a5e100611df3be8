"""The one place Redis clients are built: from ``settings.REDIS_URL`` (or a URL the caller holds),
with the timeouts each use states.

Each caller names its own timeouts because the uses differ: a page's check must fail in half a
second (connect), a stream read may wait seconds (socket), the gateway's slots wait for no pool
and the log shipper must not retry. This module keeps the construction, and redis-py's defaults
where a caller says nothing, in one file.
Not named ``redis``: that would shadow the package for ``controlpanel``'s own modules.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry


def client(
    *,
    connect_timeout_s: float,
    timeout_s: float | None = None,
    one_try: bool = False,
    url: str | None = None,
) -> redis.Redis:
    """A sync client (thread-safe, its own pool). ``timeout_s`` bounds each command (None:
    wait); ``one_try`` turns off redis-py's retries with backoff, for callers that drop the work
    anyway when Redis does not answer."""
    options: dict[str, Any] = {"socket_connect_timeout": connect_timeout_s}
    if timeout_s is not None:
        options["socket_timeout"] = timeout_s
    if one_try:
        options["retry"] = Retry(NoBackoff(), 1)
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
    options: dict[str, Any] = {"socket_connect_timeout": connect_timeout_s}
    if timeout_s is not None:
        options["socket_timeout"] = timeout_s
    if name is not None:
        options["client_name"] = name
    if keepalive:
        options["socket_keepalive"] = True
    if health_check_s:
        options["health_check_interval"] = health_check_s
    return aioredis.Redis.from_url(url or settings.REDIS_URL, **options)

"""A small in-process cache with a hard age bound, for the gateway's hot path.

Only positive answers are kept (a token that authenticates, a deployment that is running), so
a new token or a newly running deployment works at once; a revoked token, a demoted user or a
stopped deployment stops working in every process within `ttl_s` (PLAYGROUND_AUTH_CACHE_S),
and at once in the process that revoked the token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    def __init__(
        self,
        *,
        ttl_s: Callable[[], float],
        max_entries: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Future[V]] = {}  # the loads in flight

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_s, value = entry
        if self._clock() >= expires_s:
            self._entries.pop(key, None)
            return None
        return value

    async def get_or_load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or `load()`'s, kept. Concurrent misses of one key share one load
        (an entry that expires under load costs one database query, not one per request); the
        load is its own task, so a waiter that goes away cancels nobody else's wait. A load
        that raises is not kept; each waiter gets its exception."""
        value = self.get(key)
        if value is not None:
            return value
        task = self._loading.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(self._load(key, load))
            task.add_done_callback(_retrieved)
            self._loading[key] = task
        return await asyncio.shield(task)

    async def _load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        try:
            value = await load()
            self.put(key, value)
            return value
        finally:
            self._loading.pop(key, None)

    def put(self, key: K, value: V) -> None:
        ttl_s = self._ttl_s()
        if ttl_s <= 0:
            return
        if len(self._entries) >= self._max_entries:
            self._evict()
        self._entries[key] = (self._clock() + ttl_s, value)

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def _evict(self) -> None:
        now_s = self._clock()
        for key in [k for k, (expires_s, _) in self._entries.items() if expires_s <= now_s]:
            self._entries.pop(key, None)
        while len(self._entries) >= self._max_entries:
            self._entries.pop(next(iter(self._entries)))  # the oldest insertion


def _retrieved(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()  # a failed load whose waiters all went away is not "never retrieved"

"""A small in-process cache with a hard age bound, for the gateway's hot path.

Only positive answers are kept (a token that authenticates, a deployment that is running), so
a new token or a newly running deployment works at once; a revoked token, a demoted user or a
stopped deployment stops working in every process within `ttl_s` (PLAYGROUND_AUTH_CACHE_S),
and at once in the process that revoked the token.

An entry past half its age is reloaded in the background after the first request that finds
it (that request is answered from the cache): under steady traffic no request waits for the
database before its first token. The reload starts REFRESH_DELAY_S later, so that its few ms of
ORM work in a thread (holding the GIL) fall on streaming, not on that request's first token.
A reload that fails (a revoked token) drops the entry at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
REFRESH_AFTER = 0.5  # of the age bound
REFRESH_DELAY_S = 0.02


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
        self._entries: dict[K, tuple[float, float, V]] = {}  # (refresh at, expires at, value)
        self._loading: dict[K, asyncio.Future[V]] = {}  # the loads in flight
        self._reload_due: set[K] = set()  # reloads scheduled, not started yet

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        _, expires_s, value = entry
        if self._clock() >= expires_s:
            self._entries.pop(key, None)
            return None
        return value

    async def get_or_load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or `load()`'s, kept. Concurrent misses of one key share one load
        (an entry that expires under load costs one database query, not one per request); the
        load is its own task, so a waiter that goes away cancels nobody else's wait. A load
        that raises is not kept (and drops what was kept); each waiter gets its exception.
        A hit past REFRESH_AFTER of its age starts a reload and is answered at once."""
        entry = self._entries.get(key)
        if entry is not None:
            refresh_s, expires_s, value = entry
            now_s = self._clock()
            if now_s < expires_s:
                if now_s >= refresh_s and key not in self._reload_due:
                    self._reload_due.add(key)
                    asyncio.get_running_loop().call_later(REFRESH_DELAY_S, self._reload, key, load)
                return value
            self._entries.pop(key, None)
        task = self._loading.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = self._start_load(key, load)
        return await asyncio.shield(task)

    def _reload(self, key: K, load: Callable[[], Awaitable[V]]) -> None:
        self._reload_due.discard(key)
        if key not in self._loading:
            self._start_load(key, load)

    def _start_load(self, key: K, load: Callable[[], Awaitable[V]]) -> asyncio.Future[V]:
        task = asyncio.ensure_future(self._load(key, load))
        task.add_done_callback(_retrieved)
        self._loading[key] = task
        return task

    async def _load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        this = asyncio.current_task()
        # The age counts from the read, not from its end: a load that waited for a busy
        # database thread would otherwise keep what it read for longer than ttl_s.
        read_s = self._clock()
        try:
            value = await load()
        except BaseException:
            self._entries.pop(key, None)
            raise
        finally:
            current = self._loading.get(key) is this
            if current:
                self._loading.pop(key)
        if current:  # not forgotten meanwhile: a load that read before a revocation is not kept
            self.put(key, value, read_s=read_s)
        return value

    def put(self, key: K, value: V, *, read_s: float | None = None) -> None:
        """Keep `value`, read at `read_s` (now by default), until ttl_s after that read."""
        ttl_s = self._ttl_s()
        if ttl_s <= 0:
            return
        if len(self._entries) >= self._max_entries:
            self._evict()
        since_s = self._clock() if read_s is None else read_s
        self._entries[key] = (since_s + ttl_s * REFRESH_AFTER, since_s + ttl_s, value)

    def forget(self, key: K) -> None:
        """Dropped now, and whatever a load in flight reads is not kept."""
        self._entries.pop(key, None)
        self._loading.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
        self._loading.clear()

    def _evict(self) -> None:
        now_s = self._clock()
        for key in [k for k, (_, expires_s, _) in self._entries.items() if expires_s <= now_s]:
            self._entries.pop(key, None)
        while len(self._entries) >= self._max_entries:
            self._entries.pop(next(iter(self._entries)))  # the oldest insertion


def _retrieved(task: asyncio.Future[V]) -> None:
    if not task.cancelled():
        task.exception()  # a failed load whose waiters all went away is not "never retrieved"

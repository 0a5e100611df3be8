"""Keep-alive connections to the engines, kept per origin: a request costs O(1) bookkeeping.

Engines speak plain HTTP/1.1 and the gateway never limits its connection count, so this pool
keeps, per origin, a stack of idle connections (playground.gateway.engine_http's), the most
recently used on top: nothing walks every connection it holds when a request starts or ends
(a cost that grows with the streams in flight; docs/performance.md).
"""

from __future__ import annotations

import collections
import functools

from playground.gateway.engine_http import Answer, EngineConnection, connect

Origin = tuple[str, int]  # (host, port)


class EnginePool:
    def __init__(self, *, max_idle: int, keepalive_expiry: float | None) -> None:
        self._max_idle = max_idle
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[Origin, collections.deque[EngineConnection]] = {}
        self._idle_count = 0
        self._closed = False

    @property
    def idle_connections(self) -> int:
        return self._idle_count

    async def request(
        self,
        origin: Origin,
        data: bytes,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
        write_timeout: float | None,
    ) -> Answer:
        """`data` (a whole request) sent to `origin` on an idle connection or a new one; the
        answer, whose closing hands the connection back. Raises engine_http's errors."""
        if self._closed:
            raise RuntimeError("the engine connection pool is closed")
        connection = self._checkout(origin)
        if connection is None:
            connection = await connect(
                origin[0],
                origin[1],
                connect_timeout=connect_timeout,
                keepalive_expiry=self._keepalive_expiry,
            )
        # On failure the connection closes itself; it is simply not returned.
        answer = await connection.exchange(
            data, read_timeout=read_timeout, write_timeout=write_timeout
        )
        answer.on_close = functools.partial(self._release, origin, connection)
        return answer

    def _checkout(self, origin: Origin) -> EngineConnection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            # has_expired: past its keep-alive, or the engine hung up (EOF waiting unread)
            if connection.is_idle() and not connection.has_expired():
                return connection
            connection.close()
        return None

    def _release(self, origin: Origin, connection: EngineConnection) -> None:
        """A connection whose answer is closed: kept if it may carry another request."""
        if not connection.is_idle():
            return  # closed (an unfinished or non-keep-alive exchange)
        if self._closed or self._idle_count >= self._max_idle:
            connection.close()
            return
        idle = self._idle.setdefault(origin, collections.deque())
        while idle and idle[0].has_expired():  # the oldest first: expired ones go
            idle.popleft().close()
            self._idle_count -= 1
        idle.append(connection)
        self._idle_count += 1

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle, self._idle_count = self._idle, {}, 0
        for connections in idle.values():
            for connection in connections:
                connection.close()

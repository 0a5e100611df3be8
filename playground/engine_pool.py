"""Keep-alive connections to the engines, kept per origin: a request costs O(1) bookkeeping.

httpcore2's AsyncConnectionPool goes over every connection it holds, in several passes that ask
each one its state, when a request starts and again when one ends. With 32 streams in flight
that was about a fifth of the gateway's CPU per request (bench/proxy_overhead.py, cProfile).
Engines speak plain HTTP/1.1 and the gateway never limits its connection count, so this pool
keeps, per origin, a stack of idle connections (playground.engine_http's), the most recently used
on top.

It is what EngineTransport hands httpx2's transport as its pool (the same two methods), so
errors still reach the proxy as httpx2 exceptions.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpcore2

from playground.engine_http import EngineConnection, connect


class EnginePool:
    def __init__(
        self,
        *,
        max_idle: int,
        keepalive_expiry: float | None,
    ) -> None:
        self._max_idle = max_idle
        self._keepalive_expiry = keepalive_expiry
        # (host, port) → idle connections (httpcore2.Origin is not hashable)
        self._idle: dict[tuple[bytes, int], collections.deque[EngineConnection]]
        self._idle = {}
        self._idle_count = 0
        self._closed = False

    @property
    def idle_connections(self) -> int:
        return self._idle_count

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        if request.url.scheme != b"http":
            raise httpcore2.UnsupportedProtocol("engines are reached over plain http://")
        if self._closed:
            raise RuntimeError("the engine connection pool is closed")
        origin = request.url.origin
        connection = await self._checkout(origin)
        if connection is None:
            connection = await self._connect(origin, request)
        # On failure the connection closes itself (httpcore2 closes one that did not finish
        # an exchange); it is simply not returned.
        response = await connection.handle_async_request(request)
        return httpcore2.Response(
            status=response.status,
            headers=response.headers,
            content=_ReturnOnClose(response.stream, origin, connection, self),
            extensions=response.extensions,
        )

    async def _checkout(self, origin: httpcore2.Origin) -> EngineConnection | None:
        idle = self._idle.get((origin.host, origin.port))
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            # has_expired: past its keep-alive, or the engine hung up (EOF waiting unread)
            if connection.is_idle() and not connection.has_expired():
                return connection
            await connection.aclose()
        return None

    async def _connect(
        self, origin: httpcore2.Origin, request: httpcore2.Request
    ) -> EngineConnection:
        timeouts = request.extensions.get("timeout", {})
        return await connect(
            origin.host.decode("ascii"),
            origin.port,
            connect_timeout=timeouts.get("connect"),
            keepalive_expiry=self._keepalive_expiry,
        )

    async def _release(self, origin: httpcore2.Origin, connection: EngineConnection) -> None:
        """A connection whose response is closed: kept if it may carry another request."""
        if not connection.is_idle():
            return  # closed by httpcore2 (an unfinished or non-keep-alive exchange)
        if self._closed or self._idle_count >= self._max_idle:
            await connection.aclose()
            return
        idle = self._idle.setdefault((origin.host, origin.port), collections.deque())
        while idle and idle[0].has_expired():  # the oldest first: expired ones go
            await idle.popleft().aclose()
            self._idle_count -= 1
        idle.append(connection)
        self._idle_count += 1

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle, self._idle_count = self._idle, {}, 0
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()

    async def __aenter__(self) -> EnginePool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


class _ReturnOnClose:
    """A response body that hands its connection back to the pool when closed."""

    def __init__(
        self,
        stream: Any,
        origin: httpcore2.Origin,
        connection: EngineConnection,
        pool: EnginePool,
    ) -> None:
        self._stream, self._origin, self._connection, self._pool = stream, origin, connection, pool
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        # httpcore2's own body iterator: on an error it closes the connection itself.
        return aiter(self._stream)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._stream.aclose()  # back to idle when the exchange finished
        finally:
            await self._pool._release(self._origin, self._connection)

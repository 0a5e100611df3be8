"""httpcore's network layer for engine connections, on plain asyncio sockets.

httpcore2's default asyncio backend goes through anyio: every read opens a cancel scope, and
before every request the pool asks each idle keep-alive connection "is it readable?", which
anyio answers with two system calls (getpeername, poll). With 32 streams in flight that was
about 40 system calls and 2 ms of CPU per request (bench/proxy_overhead.py, profiled). Here
an asyncio protocol buffers what arrives, so a read that finds data returns at once and
"is readable" is a look at the buffer. HTTP itself (h11, pooling, keep-alive) stays httpcore's;
this is the network backend extension point it documents (`network_backend=`).

Engines are reached over plain HTTP on loopback or the host's private address: TLS is refused.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore2

PAUSE_READING_BYTES = 1 << 20  # stop reading from the engine while this much is unread
RESUME_READING_BYTES = 1 << 18
CORK_MAX_BYTES = 1 << 16  # writes are held until the next read, up to this much


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport = cast(asyncio.Transport, None)  # set by connection_made, at once
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.eof = False
        self.error: Exception | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.waiter: asyncio.Future[bool | None] | None = None
        self.drained: asyncio.Future[bool | None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > PAUSE_READING_BYTES and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def _expire(future: asyncio.Future[bool | None]) -> None:
    if not future.done():
        future.set_result(False)


class AsyncioStream(httpcore2.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._corked: list[bytes] = []
        self._corked_bytes = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        if self._corked:
            await self._flush(timeout)
        if not protocol.chunks and not protocol.eof:
            if not await self._wait_for("waiter", timeout):
                raise httpcore2.ReadTimeout(f"no data from the engine in {timeout} s")
        if protocol.chunks:
            return self._take(max_bytes)
        if protocol.error is not None:
            raise httpcore2.ReadError(str(protocol.error) or type(protocol.error).__name__)
        return b""  # the engine closed the connection

    async def _wait_for(self, event: str, timeout: float | None) -> bool:
        """Until the protocol resolves its `event` future ("waiter": data or EOF arrived,
        "drained": writing may go on); False when `timeout` seconds passed first."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool | None] = loop.create_future()
        setattr(self._protocol, event, future)
        handle = None if timeout is None else loop.call_later(timeout, _expire, future)
        try:
            await future
        finally:
            setattr(self._protocol, event, None)
            if handle is not None:
                handle.cancel()
        return future.result() is not False

    def _take(self, max_bytes: int) -> bytes:
        protocol = self._protocol
        data = protocol.chunks.popleft()
        if len(data) > max_bytes:
            data, rest = data[:max_bytes], data[max_bytes:]
            protocol.chunks.appendleft(rest)
        protocol.buffered -= len(data)
        if protocol.reading_paused and protocol.buffered < RESUME_READING_BYTES:
            protocol.reading_paused = False
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Held (corked) until the next read: httpcore2 writes a request's head and body
        separately, and one system call (one TCP segment to the engine) is cheaper than two."""
        if not buffer:
            return
        if self._protocol.eof or self._transport.is_closing():
            raise httpcore2.WriteError("the engine closed the connection")
        self._corked.append(buffer)
        self._corked_bytes += len(buffer)
        if self._corked_bytes >= CORK_MAX_BYTES:
            await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        protocol = self._protocol
        data = b"".join(self._corked)
        self._corked.clear()
        self._corked_bytes = 0
        if protocol.eof or self._transport.is_closing():
            raise httpcore2.WriteError("the engine closed the connection")
        self._transport.write(data)
        if protocol.writing_paused:
            if not await self._wait_for("drained", timeout):
                raise httpcore2.WriteTimeout(f"the engine read nothing in {timeout} s")
            if protocol.error is not None:
                raise httpcore2.WriteError(str(protocol.error))

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        self._transport.abort()
        raise httpcore2.ConnectError("engines are reached over plain HTTP; TLS is not supported")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle connection with data or EOF waiting is not reusable
            return bool(self._protocol.chunks) or self._protocol.eof
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=local
                )
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)  # asyncio already set TCP_NODELAY
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("engines are reached over TCP")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

"""An asyncio-native network backend for httpcore (under the gateway's httpx client).

httpcore's default backend goes through anyio, and its pool asks every idle connection
"is the socket readable?" on each request it assigns, which costs two system calls per idle
connection (getpeername, poll): with 32 streams that was the largest single cost per request
in the profile (bench/proxy_overhead.py --profile). Here a connection is a plain asyncio
Protocol that already knows whether the engine sent bytes or hung up, and a read is one
wake-up with a timer, not a cancel scope.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from typing import Any

import httpcore

READ_BUFFER_MAX_BYTES = 256 * 1024


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # TCP: always a Transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_BUFFER_MAX_BYTES and self.transport is not None:
            self.transport.pause_reading()  # the client reads slower than the engine writes
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait_readable(self, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = loop.call_later(timeout, self._time_out) if timeout is not None else None
        try:
            await self._waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _time_out(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(httpcore.ReadTimeout("the engine sent nothing in time"))

    async def drained(self) -> None:
        if self._drained is not None:
            await self._drained


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, connection: _Connection) -> None:
        self._conn = connection

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        conn = self._conn
        if not conn.buffer and not conn.eof:
            await conn.wait_readable(timeout)
        if conn.buffer:
            data = bytes(conn.buffer[:max_bytes])
            del conn.buffer[:max_bytes]
            if conn.transport is not None and len(conn.buffer) <= READ_BUFFER_MAX_BYTES:
                conn.transport.resume_reading()
            return data
        if conn.error is not None:
            raise httpcore.ReadError(str(conn.error))
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        conn = self._conn
        if conn.transport is None or conn.transport.is_closing():
            raise httpcore.WriteError("the engine closed the connection")
        conn.transport.write(buffer)
        try:
            async with asyncio.timeout(timeout):
                await conn.drained()
        except TimeoutError:
            raise httpcore.WriteTimeout("the engine did not take the request in time") from None

    async def aclose(self) -> None:
        if self._conn.transport is not None:
            self._conn.transport.close()

    async def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("engines are reached over plain HTTP on the host's network")

    def get_extra_info(self, info: str) -> Any:
        conn = self._conn
        if info == "is_readable":  # asked of idle connections: did the engine talk or hang up?
            return conn.eof or bool(conn.buffer)
        if conn.transport is None:
            return None
        return conn.transport.get_extra_info(
            {"server_addr": "peername", "client_addr": "sockname"}.get(info, info)
        )


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, conn = await loop.create_connection(
                    _Connection, host, port, local_addr=local
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(conn)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

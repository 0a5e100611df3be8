"""One keep-alive HTTP/1.1 connection to an engine: an asyncio protocol with httptools' parser.

The bytes the engine sends go, as they arrive, through httptools (llhttp in C; the parser
uvicorn already uses for the gateway's own clients), and a body chunk is handed to the relay
straight from the protocol: a pure-Python parser under layers of async iterators is a large
share of the gateway's CPU per relayed token (docs/performance.md).

A request goes in as the bytes to write (playground.gateway.upstream makes them: one POST, head
and body); the answer comes out as an `Answer` (status, headers, the body as it arrives), with
no request or response objects in between. Engines are reached over plain HTTP on loopback or
the host's private address: there is no TLS here. Errors are EngineIOError's kinds.

Read timeouts are checked by one timer per connection that is moved only when it fires, not by
a timer per read (a heap push and a cancel for every token).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import time
from collections.abc import Callable
from typing import cast

import httptools

PAUSE_READING_BYTES = 1 << 20  # stop reading from the engine while this much is unread
RESUME_READING_BYTES = 1 << 18


class EngineIOError(Exception):
    """The engine could not be reached, or its answer could not be read."""


class ConnectError(EngineIOError):
    pass


class ConnectTimeout(ConnectError):
    pass


class ReadTimeout(EngineIOError):
    pass


class WriteTimeout(EngineIOError):
    pass


class ReadError(EngineIOError):
    pass


class WriteError(EngineIOError):
    pass


class ProtocolError(EngineIOError):
    """The answer is not HTTP, or the engine closed the connection before its end."""


class ConnectionNotAvailable(EngineIOError):
    """This connection is busy or closed (a bug in the caller: the pool checks first)."""


class State(enum.Enum):
    IDLE = "idle"  # may carry a request
    ACTIVE = "active"  # a request is on it
    CLOSED = "closed"


async def connect(
    host: str, port: int, *, connect_timeout: float | None, keepalive_expiry: float | None
) -> EngineConnection:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(connect_timeout):
            _transport, connection = await loop.create_connection(
                lambda: EngineConnection(keepalive_expiry), host, port
            )
    except TimeoutError as exc:
        raise ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
    except OSError as exc:
        raise ConnectError(str(exc)) from exc
    return connection  # the event loop set TCP_NODELAY (asyncio and uvloop do, for TCP)


class EngineConnection(asyncio.Protocol):
    def __init__(self, keepalive_expiry: float | None) -> None:
        self._keepalive_expiry = keepalive_expiry
        self._transport = cast(asyncio.Transport, None)  # set by connection_made, at once
        self._loop = asyncio.get_running_loop()
        self.state = State.IDLE
        self._idle_until: float | None = None
        self._eof = False
        self._error: Exception | None = None
        self._unexpected = False  # bytes arrived while no request was on the connection
        self._writing_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._new_exchange()  # an EOF or stray bytes may come before any request
        # The read timeout: one timer, moved when it fires (see the module's docstring).
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def _new_exchange(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._status = 0
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_done = False
        self._complete = False
        self._keep_alive = False
        self._until_eof = True  # a body with neither length nor chunks ends when the engine closes
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._reading_paused = False

    # --- asyncio protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.state is not State.ACTIVE or self._complete:
            self._unexpected = True  # an engine talking out of turn: this connection is done
            self._transport.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"the engine's answer is not HTTP: {exc}"))
            return
        if self._buffered > PAUSE_READING_BYTES and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        """The engine closed its side: the end of a body framed "until the connection closes"
        (decided here, before the reader wakes; connection_lost comes a loop turn later)."""
        self._eof = True
        if self._head_done and not self._complete and self._until_eof:
            self._complete = True
        self._wake()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if self._error is None:  # a parse error (_fail) stays the reason
            self._error = exc
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # --- httptools callbacks ----------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self._reason = reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length" or (
            lowered == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            self._until_eof = False

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._headers = []
            self._until_eof = True
            return
        self._status = status
        self._head_done = True

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        if self._head_done:
            self._complete = True
            self._keep_alive = self._parser.should_keep_alive()  # reset after this callback

    # --- waiting, with the read timeout ------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        self._error = error
        self._transport.abort()

    async def _wait(self, timeout: float | None) -> None:
        """Until something arrives (data, the end, EOF); ReadTimeout after `timeout` s."""
        loop = self._loop
        self._waiter = waiter = loop.create_future()
        if timeout is not None:
            self._deadline = loop.time() + timeout
            if self._timer is None:
                self._timer = loop.call_at(self._deadline, self._on_timer)
        try:
            await waiter
        finally:
            self._waiter = None
        if waiter.result() is False:  # type: ignore[comparison-overlap]
            raise ReadTimeout(f"no data from the engine in {timeout} s")

    def _on_timer(self) -> None:
        waiter = self._waiter
        now = self._loop.time()
        if waiter is None or waiter.done():
            self._timer = None  # nobody waits: the next wait starts a timer
        elif now >= self._deadline:
            self._timer = None
            waiter.set_result(False)  # type: ignore[arg-type]
        else:
            self._timer = self._loop.call_at(self._deadline, self._on_timer)

    # --- one request at a time (what playground.gateway.engine_pool uses) ---------------------

    async def exchange(
        self, data: bytes, *, read_timeout: float | None, write_timeout: float | None
    ) -> Answer:
        """Writes `data` (a whole request: head and body) and reads the answer's head."""
        if self.state is not State.IDLE or self._eof:
            raise ConnectionNotAvailable("the connection is busy or closed")
        self.state = State.ACTIVE
        self._new_exchange()
        try:
            await self._send(data, write_timeout)
            while not self._head_done:
                if self._error is not None or self._eof:
                    raise self._lost("before its answer's headers")
                await self._wait(read_timeout)
        except BaseException:
            self.close()
            raise
        return Answer(self, self._status, self._reason, self._headers, read_timeout)

    async def _send(self, data: bytes, write_timeout: float | None) -> None:
        if self._eof or self._transport.is_closing():
            raise WriteError("the engine closed the connection")
        self._transport.write(data)  # head and body in one system call
        if self._writing_paused:
            self._drained = self._loop.create_future()
            try:
                async with asyncio.timeout(write_timeout):
                    await self._drained
            except TimeoutError as exc:
                raise WriteTimeout(f"the engine read nothing in {write_timeout} s") from exc
            finally:
                self._drained = None
            if self._error is not None:
                raise WriteError(str(self._error))

    def _lost(self, when: str) -> Exception:
        if isinstance(self._error, ProtocolError):
            return self._error
        if self._error is not None:
            return ReadError(f"the engine's connection failed {when}: {self._error}")
        return ProtocolError(f"the engine closed the connection {when}")

    async def _next_chunk(self, read_timeout: float | None) -> bytes | None:
        """The next piece of the body; None at its end."""
        while True:
            if self._chunks:
                data = self._chunks.popleft()
                self._buffered -= len(data)
                if self._reading_paused and self._buffered < RESUME_READING_BYTES:
                    self._reading_paused = False
                    self._transport.resume_reading()
                return data
            if self._complete:
                return None
            if self._error is not None or self._eof:
                raise self._lost("in the middle of its answer")
            await self._wait(read_timeout)

    def _exchange_closed(self) -> None:
        """The response is closed: the connection is reusable if its exchange ended cleanly."""
        if self.state is not State.ACTIVE:
            return
        reusable = self._complete and not self._until_eof and not self._eof and self._keep_alive
        if not reusable:
            self.close()
            return
        self.state = State.IDLE
        if self._keepalive_expiry is not None:
            self._idle_until = time.monotonic() + self._keepalive_expiry

    def is_idle(self) -> bool:
        return self.state is State.IDLE

    def has_expired(self) -> bool:
        """Past its keep-alive, or the engine hung up or spoke out of turn while it was idle."""
        if self._eof or self._unexpected or self._transport.is_closing():
            return True
        return self._idle_until is not None and time.monotonic() > self._idle_until

    def close(self) -> None:
        self.state = State.CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport.close()


class Answer:
    """An engine's answer: status and headers read, the body piece by piece as it arrives.
    Closing it ends the exchange (the connection is reusable if the body was read to its end)
    and then calls `on_close` (the pool takes the connection back)."""

    __slots__ = (
        "_closed",
        "_connection",
        "_read_timeout",
        "headers",
        "on_close",
        "reason",
        "status_code",
    )

    def __init__(
        self,
        connection: EngineConnection,
        status: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
        read_timeout: float | None,
    ) -> None:
        self._connection, self._read_timeout = connection, read_timeout
        self.status_code, self.reason, self.headers = status, reason, headers
        self.on_close: Callable[[], None] | None = None
        self._closed = False

    def __aiter__(self) -> Answer:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self._connection._next_chunk(self._read_timeout)
        except BaseException:
            self._connection.close()
            raise
        if data is None:
            raise StopAsyncIteration
        return data

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self])

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._connection._exchange_closed()
        if self.on_close is not None:
            self.on_close()

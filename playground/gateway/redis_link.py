"""One pipelined Redis connection of an event loop, for the gateway's slot commands.

The commands of one loop turn are written together, once the turn is done, and each reply is
matched to its command in order (Redis answers in order), read by an asyncio protocol with
hiredis' parser (the one redis-py uses).

A burst of requests arriving together is admitted in one or a few loop turns: its slot
commands reach Redis in one or a few writes, and the replies come back the same way, rather
than a send and a wake-up of Redis per command, on CPUs that Redis, the engines and the clients
share with the gateway (docs/performance.md).

The URL is REDIS_URL's (redis://, rediss://, unix://; user, password and database number),
read by redis-py's own parser. Every error is a redis.exceptions.RedisError or TimeoutError;
after one (lost connection, no answer in `timeout_s`) every command waiting on the
connection gets it and the next command connects again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any

import hiredis
from redis.connection import parse_url
from redis.exceptions import (
    AuthenticationError,
    ConnectionError,
    NoScriptError,
    ResponseError,
)


class RedisLink:
    def __init__(
        self, url: str, *, timeout_s: float, connect_timeout_s: float, name: str | None = None
    ) -> None:
        self._options = parse_url(url)
        self._name = name  # shown by CLIENT LIST
        self._timeout_s, self._connect_timeout_s = timeout_s, connect_timeout_s
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    def send(self, *args: Any) -> asyncio.Future[Any]:
        """The command written with the others of this loop turn, when connected (else once
        connected); its reply to come.
        An error reply is raised by the future (ResponseError, NoScriptError)."""
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            return protocol.send(args)
        return asyncio.ensure_future(self._send_connected(args))

    def send_if_connected(self, *args: Any) -> None:
        """Written with the others of this loop turn if there is a connection, its reply
        dropped; otherwise nothing."""
        protocol = self._protocol
        if protocol is not None and not protocol.closed:
            protocol.send(args).add_done_callback(_retrieved)

    def close(self) -> None:
        if self._protocol is not None:
            self._protocol.fail(ConnectionError("closed"))
            self._protocol = None

    async def _send_connected(self, args: tuple[Any, ...]) -> Any:
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
            self._connecting.add_done_callback(_retrieved)
        protocol = await asyncio.shield(self._connecting)
        return await protocol.send(args)

    async def _connect(self) -> _Protocol:
        options = self._options
        where = options.get("path") or f"{options.get('host')}:{options.get('port', 6379)}"
        loop = asyncio.get_running_loop()
        protocol = _Protocol(loop, self._timeout_s)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                if "path" in options:
                    await loop.create_unix_connection(lambda: protocol, options["path"])
                else:
                    await loop.create_connection(
                        lambda: protocol,
                        options.get("host", "localhost"),
                        options.get("port", 6379),
                        ssl=_tls(options),
                    )
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"Error connecting to Redis at {where}: {exc!r}") from None
        try:
            if options.get("password"):
                user = [options["username"]] if options.get("username") else []
                await protocol.send(("AUTH", *user, options["password"]))
            if options.get("db"):
                await protocol.send(("SELECT", options["db"]))
            if self._name:
                await protocol.send(("CLIENT", "SETNAME", self._name))
        except ResponseError as exc:
            protocol.fail(ConnectionError("closed"))
            raise AuthenticationError(f"Redis at {where} refused the connection: {exc}") from None
        self._protocol = protocol
        return protocol


def _tls(options: dict[str, Any]) -> ssl.SSLContext | None:
    if options.get("connection_class") is None or "path" in options:
        return None
    context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
    if str(options.get("ssl_cert_reqs", "required")).lower() == "none":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class _Protocol(asyncio.Protocol):
    """Commands out, replies in, matched in order; one lazy timer for the oldest command."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop, self._timeout_s = loop, timeout_s
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        future = self._loop.create_future()
        if self.closed or self._transport is None:
            future.set_exception(ConnectionError("Redis connection lost"))
            return future
        self._waiting.append((future, self._loop.time() + self._timeout_s))
        if self._timer is None:
            self._timer = self._loop.call_at(self._waiting[0][1], self._check_oldest)
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out.append(hiredis.pack_command(args))
        return future

    def _flush(self) -> None:
        """The commands of this loop turn, written in one go."""
        out, self._out = self._out, []
        if out and not self.closed and self._transport is not None:
            self._transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError as exc:
                self.fail(ConnectionError(f"Redis sent something that is not RESP: {exc}"))
                return
            if reply is False:
                return
            if not self._waiting:
                self.fail(ConnectionError("Redis sent a reply nobody asked for"))
                return
            future, _ = self._waiting.popleft()
            if future.done():
                continue  # its caller went away
            if isinstance(reply, ResponseError):
                future.set_exception(_error(reply))
            else:
                future.set_result(reply)

    def eof_received(self) -> bool:
        self.fail(ConnectionError("Redis closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(ConnectionError(f"Redis connection lost: {exc!r}" if exc else "closed"))

    def fail(self, exc: Exception) -> None:
        """Every waiting command gets `exc`; the connection is closed and not used again."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, deque()
        for future, _ in waiting:
            if not future.done():
                future.set_exception(exc)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def _check_oldest(self) -> None:
        self._timer = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        if self._loop.time() >= deadline:
            self.fail(TimeoutError(f"Redis did not answer in {self._timeout_s:g} s"))
        else:
            self._timer = self._loop.call_at(deadline, self._check_oldest)


def _error(reply: ResponseError) -> ResponseError:
    message = str(reply)
    return NoScriptError(message) if message.startswith("NOSCRIPT") else reply


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # an error nobody waits for is not "never retrieved"

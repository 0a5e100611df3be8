"""The gateway's HTTP client to the engines: aiohttp, one session per event loop.

A session keeps its keep-alive connections per origin (its connector's pool). Engines are
reached over plain HTTP on loopback or the host's private address. The answer comes out as an
`Answer` (status, headers, the body piece by piece as it arrives); aiohttp's errors come out
as EngineIOError's kinds, so that the relay tells a timeout from a hang-up.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from typing import Any

import aiohttp
from yarl import URL

KEEPALIVE_EXPIRY_S = 5.0


class EngineIOError(Exception):
    """The engine could not be reached, or its answer could not be read."""


class ConnectError(EngineIOError):
    pass


class ConnectTimeout(ConnectError):
    pass


class ReadTimeout(EngineIOError):
    pass


class ReadError(EngineIOError):
    pass


class ProtocolError(EngineIOError):
    """The answer is not HTTP, or the engine closed the connection before its end."""


_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def shared_session() -> aiohttp.ClientSession:
    """Keep-alive connections to every engine, reused by every request of this event loop."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_EXPIRY_S)
        session = _sessions[loop] = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # relayed as the engine sent it
            skip_auto_headers=("Accept-Encoding",),
            raise_for_status=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # engines set none; a jar is work per request
        )
    return session


async def close_session() -> None:
    """This event loop's session closed (the server is stopping): its connections are."""
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


async def post(
    url: URL,
    headers: dict[str, str],
    content: bytes,
    *,
    connect_timeout_s: float | None,
    read_timeout_s: float | None,
) -> Answer:
    """`content` POSTed to `url`; the answer, its head read. Raises EngineIOError's kinds."""
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=read_timeout_s)
    try:
        response = await shared_session().post(
            url, data=content, headers=headers, timeout=timeout, allow_redirects=False
        )
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise io_error(exc) from exc
    return Answer(response)


async def get(
    url: URL,
    headers: dict[str, str],
    *,
    connect_timeout_s: float | None,
    read_timeout_s: float | None,
) -> Answer:
    """A GET of `url` (a follow-up of a kept response); the answer, its head read."""
    timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=read_timeout_s)
    try:
        response = await shared_session().get(
            url, headers=headers, timeout=timeout, allow_redirects=False
        )
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise io_error(exc) from exc
    return Answer(response)


@functools.lru_cache(maxsize=16)
def _timeout(connect_s: float | None, read_s: float | None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=connect_s, sock_read=read_s)


def io_error(exc: BaseException) -> EngineIOError:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ConnectTimeout(str(exc) or "connecting timed out")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectError(str(exc))
    if isinstance(exc, TimeoutError):  # aiohttp's socket read timeout is one
        return ReadTimeout(str(exc) or "no data from the engine in time")
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return ProtocolError(f"the engine closed the connection before its answer's end: {exc}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return ProtocolError(f"the engine's answer is not HTTP: {exc}")
    return ReadError(f"the engine's connection failed: {exc!r}")


class Answer:
    """An engine's answer: status and headers read, the body piece by piece as it arrives.
    Closing it hands the connection back (or closes it if the body was not read to its end)."""

    __slots__ = ("_content", "_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response, self._content = response, response.content
        self.status_code: int = response.status
        self.headers: Any = response.headers

    def __aiter__(self) -> Answer:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self._content.readany()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise io_error(exc) from exc
        if not data:
            raise StopAsyncIteration
        return data

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self])

    async def aclose(self) -> None:
        self._response.release()

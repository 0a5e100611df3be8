"""One engine connection (playground.engine_http) against a raw TCP peer on loopback.

The peer writes exact bytes, so each case shows what the connection does with a given answer:
framing (length, chunks, until-close), errors, timeouts, flow control, reuse.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from playground.gateway import engine_http
from playground.gateway.engine_http import Answer, EngineConnection, connect

Peer = tuple[int, "asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]"]


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    """A TCP server; each accepted connection's reader and writer land in the queue."""
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put((reader, writer))

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], accepted
    server.close()


POST = b'POST /v1/completions HTTP/1.1\r\nHost: engine\r\nContent-Length: 15\r\n\r\n{"prompt": "x"}'


def ask(connection: EngineConnection, read: float = 2.0) -> asyncio.Task[Answer]:
    return asyncio.create_task(connection.exchange(POST, read_timeout=read, write_timeout=2.0))


async def opened(peer: Peer) -> tuple[EngineConnection, asyncio.StreamReader, asyncio.StreamWriter]:
    port, accepted = peer
    connection = await connect("127.0.0.1", port, connect_timeout=2, keepalive_expiry=5)
    reader, writer = await accepted.get()
    return connection, reader, writer


async def answered(
    peer: Peer, head: bytes, read: float = 2.0
) -> tuple[EngineConnection, asyncio.Task[Answer], asyncio.StreamWriter]:
    """A connection with a request on it, to which the peer has written `head`."""
    connection, reader, writer = await opened(peer)
    asking = ask(connection, read)
    await reader.read(65536)
    writer.write(head)
    return connection, asking, writer


async def body_of(response: Answer) -> list[bytes]:
    pieces = [piece async for piece in response]
    await response.aclose()
    return pieces


async def test_a_request_leaves_in_one_write_and_chunks_come_as_they_arrive(peer: Peer) -> None:
    connection, reader, writer = await opened(peer)
    asking = ask(connection)
    sent = await asyncio.wait_for(reader.read(65536), 2)  # one read: head and body together
    assert sent == POST
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n")
    response = await asyncio.wait_for(asking, 2)
    assert response.status_code == 200 and response.reason == b"OK"
    assert response.headers == [(b"Transfer-Encoding", b"chunked")]
    pieces = response.__aiter__()
    assert await asyncio.wait_for(pieces.__anext__(), 2) == b"data: "
    writer.write(b"3\r\none\r\n")  # the next chunk, written only now, still comes through
    assert await asyncio.wait_for(pieces.__anext__(), 2) == b"one"
    writer.write(b"0\r\n\r\n")
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(pieces.__anext__(), 2)
    await response.aclose()
    assert connection.is_idle() and not connection.has_expired()  # reusable
    second = ask(connection)
    await reader.read(65536)
    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno")
    response = await asyncio.wait_for(second, 2)
    assert response.status_code == 404 and b"".join(await body_of(response)) == b"no"
    connection.close()


async def test_a_body_without_length_ends_with_the_connection_and_is_not_reused(
    peer: Peer,
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it"
    connection, asking, writer = await answered(peer, head)
    response = await asyncio.wait_for(asking, 2)
    writer.close()
    assert b"".join(await asyncio.wait_for(body_of(response), 2)) == b"all of it"
    assert not connection.is_idle()


async def test_an_engine_that_hangs_up_mid_answer_is_a_read_error(peer: Peer) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
    connection, asking, writer = await answered(peer, head)
    response = await asyncio.wait_for(asking, 2)
    writer.close()
    with pytest.raises(engine_http.ProtocolError, match="middle of its answer"):
        await asyncio.wait_for(body_of(response), 2)
    assert not connection.is_idle()


async def test_an_answer_that_is_not_http_is_a_protocol_error(peer: Peer) -> None:
    connection, asking, _writer = await answered(peer, b"SSH-2.0-OpenSSH_9.6\r\n")
    with pytest.raises(engine_http.ProtocolError, match="not HTTP"):
        await asyncio.wait_for(asking, 2)
    assert not connection.is_idle()


async def test_a_silent_engine_is_a_read_timeout_and_a_slow_one_is_not(peer: Peer) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    connection, asking, writer = await answered(peer, head, read=0.3)
    response = await asyncio.wait_for(asking, 2)
    pieces = response.__aiter__()
    for _ in range(4):  # 0.8 s in all, but never 0.3 s without a byte: no timeout
        await asyncio.sleep(0.2)
        writer.write(b"1\r\nx\r\n")
        assert await asyncio.wait_for(pieces.__anext__(), 2) == b"x"
    with pytest.raises(engine_http.ReadTimeout):
        await asyncio.wait_for(pieces.__anext__(), 2)
    assert not connection.is_idle()


async def test_an_idle_connection_the_engine_closed_or_wrote_on_has_expired(peer: Peer) -> None:
    for misbehaviour in ("close", "write"):
        connection, _reader, writer = await opened(peer)
        assert connection.is_idle() and not connection.has_expired()
        if misbehaviour == "close":
            writer.close()
        else:
            writer.write(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
        await asyncio.sleep(0.1)
        assert connection.has_expired()
        connection.close()


async def test_nobody_listening_is_a_connect_error() -> None:
    with pytest.raises(engine_http.ConnectError):
        await connect("127.0.0.1", 1, connect_timeout=2, keepalive_expiry=None)


async def test_a_reader_that_falls_behind_pauses_the_engine(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flow control: the engine is not read faster than the client takes the answer."""
    monkeypatch.setattr(engine_http, "PAUSE_READING_BYTES", 64 * 1024)
    monkeypatch.setattr(engine_http, "RESUME_READING_BYTES", 16 * 1024)
    size = 64 * 65536  # 4 MiB; more than the kernel buffers unless reading stopped
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size
    connection, asking, writer = await answered(peer, head)
    response = await asyncio.wait_for(asking, 2)
    block = b"x" * 65536
    for _ in range(64):
        writer.write(block)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(writer.drain(), 1.0)
    assert connection._reading_paused
    received = sum(len(piece) for piece in await asyncio.wait_for(body_of(response), 5))
    assert received == size
    await asyncio.wait_for(writer.drain(), 2.0)
    assert connection.is_idle()
    connection.close()


async def test_bytes_after_a_finished_answer_make_the_connection_unusable(peer: Peer) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    connection, asking, writer = await answered(peer, head)
    response = await asyncio.wait_for(asking, 2)
    await asyncio.sleep(0.05)  # the answer is complete; the engine then writes on
    writer.write(b"HTTP/1.1 200 OK\r\n")
    await asyncio.sleep(0.05)
    assert b"".join(await body_of(response)) == b"ok"
    assert not connection.is_idle()

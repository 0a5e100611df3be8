"""The gateway's network backend for engine connections (playground.engine_net), on real sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpcore2
import pytest

from playground import engine_net
from playground.engine_net import AsyncioBackend


@pytest.fixture
async def peer() -> AsyncIterator[tuple[int, asyncio.Queue[asyncio.StreamWriter]]]:
    """A TCP server on loopback; each accepted connection's writer lands in the queue."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(writer)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], accepted
    server.close()


async def test_reads_what_arrives_and_then_the_end(peer: tuple[int, asyncio.Queue]) -> None:
    port, accepted = peer
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2)
    writer = await accepted.get()
    writer.write(b"data: one\n\n")
    assert await stream.read(65536, timeout=2) == b"data: one\n\n"
    writer.write(b"0123456789")
    await writer.drain()
    await asyncio.sleep(0.05)
    assert await stream.read(4, timeout=2) == b"0123"  # at most max_bytes, the rest stays
    assert await stream.read(65536, timeout=2) == b"456789"
    writer.close()
    assert await stream.read(65536, timeout=2) == b""
    await stream.aclose()


async def test_a_silent_peer_is_a_read_timeout(peer: tuple[int, asyncio.Queue]) -> None:
    port, accepted = peer
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2)
    await accepted.get()
    with pytest.raises(httpcore2.ReadTimeout):
        await stream.read(65536, timeout=0.1)
    await stream.aclose()


async def test_an_idle_connection_the_peer_closed_is_readable_so_not_reused(
    peer: tuple[int, asyncio.Queue],
) -> None:
    port, accepted = peer
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2)
    writer = await accepted.get()
    assert stream.get_extra_info("is_readable") is False
    writer.close()
    await asyncio.sleep(0.1)
    assert stream.get_extra_info("is_readable") is True
    assert stream.get_extra_info("server_addr") is not None
    await stream.aclose()


async def test_nobody_listening_is_a_connect_error() -> None:
    with pytest.raises(httpcore2.ConnectError):
        await AsyncioBackend().connect_tcp("127.0.0.1", 1, timeout=2)


async def test_a_reader_that_falls_behind_pauses_the_peer(
    peer: tuple[int, asyncio.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flow control: the engine is not read faster than the client takes the answer."""
    monkeypatch.setattr(engine_net, "PAUSE_READING_BYTES", 64 * 1024)
    monkeypatch.setattr(engine_net, "RESUME_READING_BYTES", 16 * 1024)
    port, accepted = peer
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2)
    writer = await accepted.get()
    block = b"x" * 65536
    for _ in range(64):  # 4 MiB; more than the kernel buffers unless reading stopped
        writer.write(block)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(writer.drain(), 1.0)
    assert stream._protocol.reading_paused  # type: ignore[attr-defined]
    received = 0
    while received < 64 * 65536:
        received += len(await stream.read(65536, timeout=2))
    await asyncio.wait_for(writer.drain(), 2.0)
    writer.close()
    await stream.aclose()


async def test_a_request_leaves_in_one_write_when_the_answer_is_awaited() -> None:
    """httpcore2 writes head and body separately; they are held until the read that follows,
    and then sent together; a large body is not held."""
    accepted: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()

    async def on_connect(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await accepted.put(reader)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=2)
    peer = await accepted.get()
    await stream.write(b"POST / HTTP/1.1\r\n\r\n")
    await stream.write(b'{"prompt": "x"}')
    with pytest.raises(TimeoutError):  # nothing sent yet
        await asyncio.wait_for(peer.read(65536), 0.1)
    reading = asyncio.create_task(stream.read(65536, timeout=2))
    assert await asyncio.wait_for(peer.read(65536), 2) == b'POST / HTTP/1.1\r\n\r\n{"prompt": "x"}'
    reading.cancel()
    big = b"y" * engine_net.CORK_MAX_BYTES
    await stream.write(big)  # at the bound: sent at once, no read needed
    assert await asyncio.wait_for(peer.readexactly(len(big)), 2) == big
    await stream.aclose()
    server.close()

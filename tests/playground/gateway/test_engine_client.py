"""The gateway's client to the engines (playground.gateway.engine_client, aiohttp): reuse,
framing and errors, against the stand-in engine and against a raw TCP peer on loopback.

The stand-in counts the TCP connections it accepted: that is what shows a connection reused,
or not reused when it must not be. The raw peer writes exact bytes, so each case shows what
the client does with a given answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from playground.gateway import engine_client, upstream
from playground.gateway.engine_client import Answer
from playground.gateway.upstream import Target, UpstreamError
from tests.support.stub_upstream import StubUpstream

STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture(autouse=True)
async def session_closed() -> AsyncIterator[None]:
    yield
    await engine_client.close_session()  # as the server does when it stops


@pytest.fixture
def engine() -> Iterator[StubUpstream]:
    stub = StubUpstream(tokens=3).start()
    yield stub
    stub.stop()


async def post(base_url: str, path: str, body: dict[str, Any], read_s: float = 5) -> Answer:
    url, headers = upstream.request_parts(base_url, path, None)
    content = json.dumps(body).encode()
    return await engine_client.post(
        url, headers, content, connect_timeout_s=2, read_timeout_s=read_s
    )


async def stream_all(base_url: str) -> bytes:
    answer = await post(base_url, "/v1/chat/completions", STREAM)
    assert answer.status_code == 200
    try:
        return await answer.aread()
    finally:
        await answer.aclose()


async def test_one_connection_carries_requests_one_after_another(engine: StubUpstream) -> None:
    for _ in range(3):
        assert b"t2" in await stream_all(engine.url)
        whole = await post(engine.url, "/v1/completions", {"prompt": "x"})
        assert json.loads(await whole.aread())["usage"]["completion_tokens"] == 3
        await whole.aclose()
    assert engine.connections == 1
    assert len(engine.seen) == 6
    assert engine.seen[0].headers["host"] == engine.url.removeprefix("http://")


async def test_concurrent_requests_each_get_a_connection_and_all_come_back(
    engine: StubUpstream,
) -> None:
    for _ in range(2):
        bodies = await asyncio.gather(*(stream_all(engine.url) for _ in range(4)))
        assert all(b"t2" in body for body in bodies)
    assert engine.connections == 4  # the second round reused the first round's four


async def test_an_answer_closed_before_its_end_does_not_return_its_connection() -> None:
    engine = StubUpstream(tokens=50, interval_s=0.02).start()
    try:
        answer = await post(engine.url, "/v1/chat/completions", STREAM)
        async for _ in answer:
            break  # the rest of the answer is still coming: the connection is not reusable
        await answer.aclose()
        assert b"t49" in await stream_all(engine.url)
        assert engine.connections == 2
    finally:
        engine.stop()


async def test_a_connection_the_engine_hung_up_is_not_reused() -> None:
    engine = StubUpstream(tokens=3, close_after_response=True).start()
    try:
        for _ in range(3):
            assert b"t2" in await stream_all(engine.url)
            await asyncio.sleep(0.05)  # the engine's FIN has arrived
        assert engine.connections == 3
    finally:
        engine.stop()


async def test_nobody_listening_is_a_connect_error() -> None:
    with pytest.raises(engine_client.ConnectError):
        await post("http://127.0.0.1:9", "/v1/completions", {"prompt": "x"})


async def test_only_plain_http_engines_are_reached() -> None:
    target = Target(1, "tls", "vllm", "https://127.0.0.1:9", None)
    with pytest.raises(UpstreamError, match="plain http://") as raised:
        await upstream.open_response(target, "/v1/completions", {"prompt": "x"})
    assert raised.value.status == 502


def test_the_request_names_the_engine_and_nothing_injected() -> None:
    url, headers = upstream.request_parts("http://u:p@10.0.0.7:8001", "/v1/completions", "sk-1")
    assert str(url) == "http://10.0.0.7:8001/v1/completions"  # never user:password@
    assert headers["Authorization"] == "Bearer sk-1"
    for base, key in (("http://10.0.0.7:8001", "sk-1\r\nX-Evil: 1"), ("http://h\n:1", None)):
        with pytest.raises(ValueError, match="line break"):
            upstream.request_parts(base, "/v1/completions", key)


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


async def answered(
    peer: Peer, head: bytes, read_s: float = 2.0
) -> tuple[asyncio.Task[Answer], asyncio.StreamWriter]:
    """A request to the peer, which has answered `head`."""
    port, accepted = peer
    asking = asyncio.create_task(
        post(f"http://127.0.0.1:{port}", "/v1/completions", {"prompt": "x"}, read_s)
    )
    reader, writer = await asyncio.wait_for(accepted.get(), 2)
    await reader.read(65536)
    writer.write(head)
    return asking, writer


async def test_chunks_come_as_they_arrive(peer: Peer) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n"
    asking, writer = await answered(peer, head)
    response = await asyncio.wait_for(asking, 2)
    pieces = response.__aiter__()
    assert await asyncio.wait_for(pieces.__anext__(), 2) == b"data: "
    writer.write(b"3\r\none\r\n")  # the next chunk, written only now, still comes through
    assert await asyncio.wait_for(pieces.__anext__(), 2) == b"one"
    writer.write(b"0\r\n\r\n")
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(pieces.__anext__(), 2)
    await response.aclose()


async def test_an_engine_that_hangs_up_mid_answer_is_a_protocol_error(peer: Peer) -> None:
    asking, writer = await answered(peer, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
    response = await asyncio.wait_for(asking, 2)
    writer.close()
    with pytest.raises(engine_client.ProtocolError):
        await asyncio.wait_for(response.aread(), 2)
    await response.aclose()


async def test_an_answer_that_is_not_http_is_a_protocol_error(peer: Peer) -> None:
    asking, _writer = await answered(peer, b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    with pytest.raises(engine_client.ProtocolError):
        await asyncio.wait_for(asking, 2)


async def test_a_silent_engine_is_a_read_timeout_and_a_slow_one_is_not(peer: Peer) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    asking, writer = await answered(peer, head, read_s=0.3)
    response = await asyncio.wait_for(asking, 2)
    pieces = response.__aiter__()
    for _ in range(4):  # 0.8 s in all, but never 0.3 s without a byte: no timeout
        await asyncio.sleep(0.2)
        writer.write(b"1\r\nx\r\n")
        assert await asyncio.wait_for(pieces.__anext__(), 2) == b"x"
    with pytest.raises(engine_client.ReadTimeout):
        await asyncio.wait_for(pieces.__anext__(), 2)
    await response.aclose()

"""The gateway's engine connection pool (playground.engine_pool), against a real stand-in engine.

The stand-in counts the TCP connections it accepted: that is what shows a connection reused,
or not reused when it must not be.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest

from playground.upstream import EngineTransport
from tests.playground.stub_upstream import StubUpstream

STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture
def engine() -> Iterator[StubUpstream]:
    stub = StubUpstream(tokens=3).start()
    yield stub
    stub.stop()


@pytest.fixture
async def transport() -> AsyncIterator[EngineTransport]:
    transport = EngineTransport()
    yield transport
    await transport.aclose()


async def stream_all(client: httpx2.AsyncClient, engine: StubUpstream) -> bytes:
    async with client.stream("POST", f"{engine.url}/v1/chat/completions", json=STREAM) as r:
        assert r.status_code == 200
        return await r.aread()


async def test_one_connection_carries_requests_one_after_another(
    engine: StubUpstream, transport: EngineTransport
) -> None:
    async with httpx2.AsyncClient(transport=transport) as client:
        for _ in range(3):
            assert b"t2" in await stream_all(client, engine)
            whole = await client.post(f"{engine.url}/v1/completions", json={"prompt": "x"})
            assert whole.json()["usage"]["completion_tokens"] == 3
    assert engine.connections == 1
    assert len(engine.seen) == 6


async def test_concurrent_requests_each_get_a_connection_and_all_come_back(
    engine: StubUpstream, transport: EngineTransport
) -> None:
    client = httpx2.AsyncClient(transport=transport)
    for _ in range(2):
        bodies = await asyncio.gather(*(stream_all(client, engine) for _ in range(4)))
        assert all(b"t2" in body for body in bodies)
        assert transport.pool.idle_connections == 4
    assert engine.connections == 4  # the second round reused the first round's four


async def test_an_answer_closed_before_its_end_does_not_return_its_connection(
    transport: EngineTransport,
) -> None:
    engine = StubUpstream(tokens=50, interval_s=0.02).start()
    try:
        client = httpx2.AsyncClient(transport=transport)
        url = f"{engine.url}/v1/chat/completions"
        async with client.stream("POST", url, json=STREAM) as response:
            async for _ in response.aiter_raw():
                break  # the rest of the answer is still coming: the connection is not reusable
        assert transport.pool.idle_connections == 0
        assert b"t49" in await stream_all(client, engine)
        assert engine.connections == 2
    finally:
        engine.stop()


async def test_a_connection_the_engine_hung_up_is_not_reused(transport: EngineTransport) -> None:
    engine = StubUpstream(tokens=3, close_after_response=True).start()
    try:
        client = httpx2.AsyncClient(transport=transport)
        for _ in range(3):
            assert b"t2" in await stream_all(client, engine)
            await asyncio.sleep(0.05)  # the engine's FIN has arrived
        assert engine.connections == 3
    finally:
        engine.stop()


async def test_no_more_idle_connections_are_kept_than_allowed(engine: StubUpstream) -> None:
    transport = EngineTransport(max_idle=2)
    client = httpx2.AsyncClient(transport=transport)
    await asyncio.gather(*(stream_all(client, engine) for _ in range(3)))
    assert transport.pool.idle_connections == 2
    await transport.aclose()
    assert transport.pool.idle_connections == 0


async def test_an_idle_connection_past_its_keepalive_is_closed_not_reused(
    engine: StubUpstream,
) -> None:
    transport = EngineTransport(keepalive_expiry_s=0.05)
    client = httpx2.AsyncClient(transport=transport)
    await stream_all(client, engine)
    await asyncio.sleep(0.1)
    await stream_all(client, engine)
    assert engine.connections == 2
    await transport.aclose()


async def test_nobody_listening_is_an_httpx_connect_error(transport: EngineTransport) -> None:
    client = httpx2.AsyncClient(transport=transport)
    with pytest.raises(httpx2.ConnectError):
        await client.post("http://127.0.0.1:9/v1/completions", json={"prompt": "x"})


async def test_https_is_refused(transport: EngineTransport) -> None:
    client = httpx2.AsyncClient(transport=transport)
    with pytest.raises(httpx2.UnsupportedProtocol):
        await client.post("https://127.0.0.1:9/v1/completions", json={"prompt": "x"})

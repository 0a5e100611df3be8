"""The gateway's engine connection pool (playground.engine_pool), against a real stand-in engine.

The stand-in counts the TCP connections it accepted: that is what shows a connection reused,
or not reused when it must not be.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from playground.gateway import engine_http, upstream
from playground.gateway.engine_pool import EnginePool
from playground.gateway.upstream import Target, UpstreamError
from tests.support.stub_upstream import StubUpstream

STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture
def engine() -> Iterator[StubUpstream]:
    stub = StubUpstream(tokens=3).start()
    yield stub
    stub.stop()


@pytest.fixture
async def pool() -> AsyncIterator[EnginePool]:
    pool = EnginePool(max_idle=64, keepalive_expiry=5.0)
    yield pool
    await pool.aclose()


async def post(
    pool: EnginePool, base_url: str, path: str, body: dict[str, Any]
) -> engine_http.Answer:
    origin, head = upstream.request_head(base_url, path, None)
    content = json.dumps(body).encode()
    data = b"%sContent-Length: %d\r\n\r\n%s" % (head, len(content), content)
    return await pool.request(origin, data, connect_timeout=2, read_timeout=5, write_timeout=5)


async def stream_all(pool: EnginePool, engine: StubUpstream) -> bytes:
    answer = await post(pool, engine.url, "/v1/chat/completions", STREAM)
    assert answer.status_code == 200
    try:
        return await answer.aread()
    finally:
        await answer.aclose()


async def test_one_connection_carries_requests_one_after_another(
    engine: StubUpstream, pool: EnginePool
) -> None:
    for _ in range(3):
        assert b"t2" in await stream_all(pool, engine)
        whole = await post(pool, engine.url, "/v1/completions", {"prompt": "x"})
        assert json.loads(await whole.aread())["usage"]["completion_tokens"] == 3
        await whole.aclose()
    assert engine.connections == 1
    assert len(engine.seen) == 6
    assert engine.seen[0].headers["host"] == engine.url.removeprefix("http://")


async def test_concurrent_requests_each_get_a_connection_and_all_come_back(
    engine: StubUpstream, pool: EnginePool
) -> None:
    for _ in range(2):
        bodies = await asyncio.gather(*(stream_all(pool, engine) for _ in range(4)))
        assert all(b"t2" in body for body in bodies)
        assert pool.idle_connections == 4
    assert engine.connections == 4  # the second round reused the first round's four


async def test_an_answer_closed_before_its_end_does_not_return_its_connection(
    pool: EnginePool,
) -> None:
    engine = StubUpstream(tokens=50, interval_s=0.02).start()
    try:
        answer = await post(pool, engine.url, "/v1/chat/completions", STREAM)
        async for _ in answer:
            break  # the rest of the answer is still coming: the connection is not reusable
        await answer.aclose()
        assert pool.idle_connections == 0
        assert b"t49" in await stream_all(pool, engine)
        assert engine.connections == 2
    finally:
        engine.stop()


async def test_a_connection_the_engine_hung_up_is_not_reused(pool: EnginePool) -> None:
    engine = StubUpstream(tokens=3, close_after_response=True).start()
    try:
        for _ in range(3):
            assert b"t2" in await stream_all(pool, engine)
            await asyncio.sleep(0.05)  # the engine's FIN has arrived
        assert engine.connections == 3
    finally:
        engine.stop()


async def test_no_more_idle_connections_are_kept_than_allowed(engine: StubUpstream) -> None:
    pool = EnginePool(max_idle=2, keepalive_expiry=5.0)
    await asyncio.gather(*(stream_all(pool, engine) for _ in range(3)))
    assert pool.idle_connections == 2
    await pool.aclose()
    assert pool.idle_connections == 0


async def test_an_idle_connection_past_its_keepalive_is_closed_not_reused(
    engine: StubUpstream,
) -> None:
    pool = EnginePool(max_idle=64, keepalive_expiry=0.05)
    await stream_all(pool, engine)
    await asyncio.sleep(0.1)
    await stream_all(pool, engine)
    assert engine.connections == 2
    await pool.aclose()


async def test_nobody_listening_is_a_connect_error(pool: EnginePool) -> None:
    with pytest.raises(engine_http.ConnectError):
        await post(pool, "http://127.0.0.1:9", "/v1/completions", {"prompt": "x"})


async def test_only_plain_http_engines_are_reached(settings: Any) -> None:
    target = Target(1, "tls", "vllm", "https://127.0.0.1:9", None)
    with pytest.raises(UpstreamError, match="plain http://") as raised:
        await upstream.open_response(target, "/v1/completions", {"prompt": "x"})
    assert raised.value.status == 502


def test_the_request_head_names_the_engine_and_nothing_injected() -> None:
    origin, head = upstream.request_head("http://u:p@10.0.0.7:8001", "/v1/completions", "sk-1")
    assert origin == ("10.0.0.7", 8001)
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/completions HTTP/1.1" and "Host: 10.0.0.7:8001" in lines
    assert "Authorization: Bearer sk-1" in lines and "u:p" not in head.decode()
    for base, key in (("http://10.0.0.7:8001", "sk-1\r\nX-Evil: 1"), ("http://h\n:1", None)):
        with pytest.raises(ValueError, match="line break"):
            upstream.request_head(base, "/v1/completions", key)

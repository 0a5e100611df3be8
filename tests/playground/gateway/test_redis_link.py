"""playground.gateway.redis_link: one pipelined connection, against a real redis-server of its own."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest
import redis
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError

from playground.gateway.redis_link import RedisLink
from tests.support.private_redis import PrivateRedis


def clients(server: PrivateRedis, name: str) -> int:
    """The connections Redis has from clients of that name."""
    return [c["name"] for c in redis.Redis.from_url(server.url).client_list()].count(name)


async def test_commands_sent_together_are_answered_in_order_on_one_connection(
    private_redis: PrivateRedis,
) -> None:
    link = RedisLink(private_redis.url, timeout_s=1, connect_timeout_s=1, name="linked")
    replies = await asyncio.gather(*(link.send("INCR", "n") for _ in range(100)))
    assert replies == list(range(1, 101))
    assert clients(private_redis, "linked") == 1
    link.close()


async def test_the_commands_of_one_loop_turn_reach_redis_in_one_write(
    private_redis: PrivateRedis,
) -> None:
    link = RedisLink(private_redis.url, timeout_s=1, connect_timeout_s=1)
    await link.send("PING")  # connected
    transport = link._protocol._transport  # type: ignore[union-attr]
    writes: list[bytes] = []
    write = transport.write  # type: ignore[union-attr]
    transport.write = lambda data: (writes.append(data), write(data))  # type: ignore[union-attr]
    burst = [link.send("INCR", "n") for _ in range(32)]  # one turn, as a burst is admitted
    assert writes == []  # not one by one as they come
    assert await asyncio.gather(*burst) == list(range(1, 33))
    assert len(writes) == 1 and writes[0].count(b"INCR") == 32
    link.close()


async def test_an_error_reply_goes_to_its_own_command_only(private_redis: PrivateRedis) -> None:
    link = RedisLink(private_redis.url, timeout_s=1, connect_timeout_s=1)
    await link.send("SET", "text", "not a number")
    results = await asyncio.gather(
        link.send("INCR", "text"), link.send("INCR", "n"), return_exceptions=True
    )
    assert isinstance(results[0], ResponseError) and "not an integer" in str(results[0])
    assert results[1] == 1
    assert await link.send("GET", "text") == b"not a number"
    link.close()


async def test_the_urls_password_and_database_are_used(private_redis: PrivateRedis) -> None:
    redis.Redis.from_url(private_redis.url).config_set("requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{private_redis.port}/3"
    link = RedisLink(url, timeout_s=1, connect_timeout_s=1)
    await link.send("SET", "where", "db3")
    assert redis.Redis.from_url(url).get("where") == b"db3"
    link.close()
    wrong = RedisLink(url.replace("s3cret", "wrong"), timeout_s=1, connect_timeout_s=1)
    with pytest.raises(AuthenticationError, match="refused the connection"):
        await wrong.send("PING")


async def test_a_redis_that_stops_answering_times_out_and_is_used_again_later(
    private_redis: PrivateRedis,
) -> None:
    link = RedisLink(private_redis.url, timeout_s=0.3, connect_timeout_s=1)
    assert await link.send("PING") == b"PONG"
    assert private_redis.proc is not None
    os.kill(private_redis.proc.pid, signal.SIGSTOP)
    try:
        started = asyncio.get_running_loop().time()
        results = await asyncio.gather(link.send("PING"), link.send("PING"), return_exceptions=True)
        waited = asyncio.get_running_loop().time() - started
    finally:
        os.kill(private_redis.proc.pid, signal.SIGCONT)
    assert all(isinstance(r, TimeoutError) for r in results), results
    assert 0.25 <= waited < 1.0
    assert await link.send("PING") == b"PONG"  # a new connection
    link.close()


async def test_a_restarted_redis_fails_what_waits_and_is_reconnected(
    private_redis: PrivateRedis, settings: Any
) -> None:
    link = RedisLink(private_redis.url, timeout_s=1, connect_timeout_s=1)
    assert await link.send("PING") == b"PONG"
    private_redis.stop()
    with pytest.raises(ConnectionError):
        await link.send("PING")
    with pytest.raises(ConnectionError, match="Error connecting to Redis"):
        await link.send("PING")
    private_redis.start()
    assert await link.send("PING") == b"PONG"
    link.close()

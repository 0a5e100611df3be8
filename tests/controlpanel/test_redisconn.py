"""The Redis clients the panel builds: after Redis restarts, the next command on an asyncio
client's pooled connection (which the old server closed) is answered, not failed. (The sync
pool notices such a connection when it hands it out.)"""

from __future__ import annotations

import asyncio

from controlpanel import redisconn
from tests.support.private_redis import PrivateRedis


def _restart(server: PrivateRedis) -> None:
    server.stop()
    server.start()


def test_an_async_pooled_connection_closed_by_a_restart_is_redialed(
    private_redis: PrivateRedis,
):
    async def scenario() -> tuple[object, object]:
        client = redisconn.async_client(url=private_redis.url, connect_timeout_s=1, timeout_s=1)
        # Two connections in the pool, both idle when Redis goes, as the gateway's are.
        await asyncio.gather(client.blpop(["none"], timeout=0.2), client.ping())
        await asyncio.to_thread(_restart, private_redis)
        answers = await asyncio.gather(client.ping(), client.ping())
        await client.aclose()
        return answers[0], answers[1]

    assert asyncio.run(scenario()) == (True, True)

"""The process-local fan-out (monitoring.live) through real Redis: consumers, restarts, leaks."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections

from controlpanel.asgi import application
from monitoring import live
from monitoring.host import worker
from tests.support.monitoring import registered, ws_connect, ws_headers, ws_next_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_the_sync_thread_connection() -> AsyncIterator[None]:
    """sync_to_async runs the ORM in asgiref's one shared thread, whose database connection
    nobody closes; left open, it kept the test database from being dropped at the end."""
    yield
    await sync_to_async(connections.close_all)()


class Collector:
    """A subscriber that keeps what it is given (the hub's own protocol, nothing patched)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.arrived = asyncio.Event()

    async def deliver(self, text: str) -> None:
        self.texts.append(text)
        self.arrived.set()


def numsub(client: redis.Redis, name: str) -> int:
    return int(dict(client.pubsub_numsub(name))[name.encode()])  # type: ignore[arg-type]


async def eventually(predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.02)


async def publish_until(client: redis.Redis, host: str, text: str, *got: Collector) -> None:
    """Publish until every collector got something (a fresh subscription needs a moment)."""
    for _ in range(100):
        await sync_to_async(live.publish)(client, host, text)
        try:
            await asyncio.wait_for(asyncio.gather(*(c.arrived.wait() for c in got)), 0.1)
            return
        except TimeoutError:
            continue
    raise AssertionError("nothing arrived")


async def test_two_consumers_both_receive_and_disconnects_unsubscribe(
    viewer, host_name, sim4, redis_client
) -> None:
    await sync_to_async(registered)(host_name, sim4)
    name = live.stream(host_name)
    first = await ws_connect(viewer, f"?host={host_name}")
    second = await ws_connect(viewer, f"?host={host_name}")
    await ws_next_of(first, "backfill", host_name)
    await ws_next_of(second, "backfill", host_name)
    hub = live.hub()
    assert len(hub.subscribers[name]) == 2
    assert numsub(redis_client, name) == 1  # one subscription for the process, not per socket

    await sync_to_async(worker.publish)(host_name, sim4.sample(), sim4, {})
    one = await ws_next_of(first, "sample", host_name)
    two = await ws_next_of(second, "sample", host_name)
    assert one == two and one["h"] == host_name and len(one["g"]) == 4

    await first.disconnect()
    await eventually(lambda: len(hub.subscribers.get(name, ())) == 1)
    assert numsub(redis_client, name) == 1
    await sync_to_async(worker.publish)(host_name, sim4.sample(), sim4, {})
    assert (await ws_next_of(second, "sample", host_name))["h"] == host_name

    await second.disconnect()
    await eventually(lambda: name not in hub.subscribers)
    await eventually(lambda: numsub(redis_client, name) == 0)
    await eventually(lambda: not hub.running)


async def test_a_cancelled_consumer_leaves_too(viewer, host_name, sim4) -> None:
    await sync_to_async(registered)(host_name, sim4)
    comm = await ws_connect(viewer, f"?host={host_name}")
    await ws_next_of(comm, "backfill", host_name)
    name = live.stream(host_name)
    assert len(live.hub().subscribers[name]) == 1
    comm.future.cancel()  # what an ASGI server does to an application that ignores its disconnect
    await eventually(lambda: name not in live.hub().subscribers)


async def test_registration_is_announced_and_the_page_can_ask_for_that_host(
    viewer, host_name, sim4
) -> None:
    comm = await ws_connect(viewer, "?window=5m")
    await ws_next_of(comm, "backfill", host_name)
    await sync_to_async(registered)(host_name, sim4)  # worker.register publishes {"type": "host"}
    announced = await ws_next_of(comm, "host", host_name)
    assert announced == {"type": "host", "h": host_name}

    await comm.send_json_to({"type": "host", "h": host_name})
    backfill = await ws_next_of(comm, "backfill", host_name)
    assert backfill["w"] == "5m"
    [host] = backfill["hosts"]
    assert host["h"] == host_name and [d["i"] for d in host["devices"]] == [0, 1, 2, 3]
    await comm.send_json_to({"type": "host"})
    assert (await comm.receive_json_from(timeout=5))["type"] == "error"
    await comm.disconnect()


async def test_a_host_socket_serves_only_its_host(viewer, host_name, sim4) -> None:
    await sync_to_async(registered)(host_name, sim4)
    comm = WebsocketCommunicator(
        application, f"/ws/gpus/?host={host_name}", headers=await ws_headers(viewer)
    )
    assert (await comm.connect(timeout=5))[0]
    await ws_next_of(comm, "backfill", host_name)
    await comm.send_json_to({"type": "host", "h": "some-other-host"})
    reply = await comm.receive_json_from(timeout=5)
    assert reply["type"] == "error" and "one host" in reply["error"]
    await comm.disconnect()


# --- the hub on its own Redis: several processes' hubs, a Redis restart ----------------------


async def test_every_process_hub_subscribes_for_itself(private_redis) -> None:
    client = redis.Redis.from_url(private_redis.url)
    hubs = [live.LiveHub(private_redis.url), live.LiveHub(private_redis.url)]  # two processes
    got = [Collector(), Collector()]
    for hub, collector in zip(hubs, got, strict=True):
        await hub.join(live.stream(None), collector)
    await publish_until(client, "h1", '{"type":"sample","h":"h1"}', *got)
    assert numsub(client, live.stream(None)) == 2
    assert [json.loads(c.texts[0])["h"] for c in got] == ["h1", "h1"]
    for hub, collector in zip(hubs, got, strict=True):
        hub.leave(live.stream(None), collector)
    await eventually(lambda: numsub(client, live.stream(None)) == 0)


async def test_the_hub_resubscribes_after_a_redis_restart(private_redis, caplog) -> None:
    caplog.set_level(logging.INFO, logger="monitoring.live")
    client = redis.Redis.from_url(private_redis.url)
    hub = live.LiveHub(private_redis.url)
    collector = Collector()
    await hub.join(live.stream("h1"), collector)
    await publish_until(client, "h1", "before", collector)
    hub.leave(live.stream("h1"), collector)  # the last page left: an idle close, no failure
    await eventually(lambda: not hub.running)
    await hub.join(live.stream("h1"), collector)
    assert "again" not in caplog.text  # reopening after an idle close is not a recovery

    private_redis.stop()
    await asyncio.sleep(0.5)  # the hub notices and starts retrying
    private_redis.start()
    collector.arrived.clear()
    await publish_until(client, "h1", "after", collector)
    assert collector.texts[0] == "before" and collector.texts[-1] == "after"
    assert numsub(client, live.stream("h1")) == 1
    assert "subscribed to 1 stream(s) again" in caplog.text
    hub.leave(live.stream("h1"), collector)
    await eventually(lambda: not hub.running)

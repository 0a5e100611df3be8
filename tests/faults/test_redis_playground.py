"""Redis stopped and started again while the playground streams an answer.

The web server (real uvicorn, forked with its Redis pointed at one of the test's own) keeps
the per-user slots and the replica in-flight counts in Redis. The engine is the stand-in that
holds its answer after the first chunk, so that Redis goes away at a known point mid-stream.
What the user sees: the stream in flight completes, a request made while Redis is down is
answered (the limits are not enforced, and that is logged), and after the restart the limit
holds again. Nothing is lost or leaked: an audit row per request, no slot or in-flight count
left in Redis once the streams end.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from controlpanel.models import AuditEvent
from deployments.models import Deployment, Status
from playground.gateway.balance import inflight_key
from playground.gateway.limits import slot_key
from tests.faults.support import check_after
from tests.support.gateway import session_for, sse_data, sse_stream
from tests.support.hosts import sim_host
from tests.support.live_server import start_server, stop_server
from tests.support.private_redis import PrivateRedis
from tests.support.stub_upstream import StubUpstream
from tests.support.waiting import wait_for

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
LIMIT = 2


@pytest.fixture
def web(transactional_db: None, private_redis: PrivateRedis, settings: Any) -> Iterator[str]:
    """Set before the server forks: its Redis clients are made from these settings."""
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    settings.REDIS_URL = private_redis.url
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "LOCATION": private_redis.url},
    }
    settings.PLAYGROUND_MAX_CONCURRENT = LIMIT
    settings.PLAYGROUND_AUTH_CACHE_S = 0
    server = start_server()
    yield f"http://127.0.0.1:{server.port.value}"
    stop_server(server)


@pytest.fixture
def engine() -> Iterator[StubUpstream]:
    stub = StubUpstream(hold_after_first=threading.Event()).start()
    yield stub
    stub.hold_after_first.set()  # type: ignore[union-attr]
    stub.stop()


def _texts(raw: bytes) -> list[str]:
    data = sse_data(raw.decode())
    assert data and data[-1] == "[DONE]", data
    return [json.loads(d)["choices"][0]["delta"]["content"] for d in data[:-1]]


def _requests() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="playground.request").order_by("id"))


@pytest.mark.timeout(120)
def test_redis_restarted_during_playground_stream(
    web: str, engine: StubUpstream, private_redis: PrivateRedis, operator: Any
) -> None:
    host = sim_host("streamhost", 1)
    d = Deployment.objects.create(
        name="chat",
        model_id="/models/tiny",
        engine="transformers",
        host=host,
        status=Status.RUNNING,
        bind_host="127.0.0.1",
        port=engine.port,
        created_by=operator,
    )
    cookies, headers = session_for(operator)  # as the playground page calls /v1/
    url = f"{web}/v1/chat/completions"
    hold = engine.hold_after_first
    assert hold is not None
    with sse_stream(url, CHAT, headers, cookies=cookies) as streaming:
        assert streaming.status_code == 200
        chunks = streaming.iter_raw()
        first = next(chunks)
        private_redis.stop()
        start_s = time.monotonic()
        during = httpx.post(url, json=CHAT, headers=headers, cookies=cookies, timeout=15)
        act_again_s = time.monotonic() - start_s
        assert during.status_code == 200, during.text  # answered, unlimited (logged)
        page = httpx.get(f"{web}/playground/", cookies=cookies, timeout=15)
        assert page.status_code == 200 and "Traceback" not in page.text
        private_redis.start()
        hold.set()
        rest = first + b"".join(chunks)
    assert _texts(rest) == [f"t{i} " for i in range(5)]  # the stream in flight completed

    _limit_holds_again(url, headers, cookies, engine)
    rows = wait_for(lambda: len(_requests()) >= 2 + LIMIT + 1 and _requests())
    statuses = [row.detail["status"] for row in rows]
    assert statuses.count("ok") == 2 + LIMIT, statuses  # no audit row lost
    client = redis.Redis.from_url(private_redis.url)
    keys = [slot_key(operator.pk), inflight_key(d.pk)]
    wait_for(lambda: sum(client.zcard(k) for k in keys) == 0)  # none leaked
    client.close()
    check_after("Redis stopped and restarted during a playground stream", act_again_s, [], [])


def _limit_holds_again(url: str, headers: Any, cookies: Any, engine: StubUpstream) -> None:
    """After the restart the per-user limit is enforced again: LIMIT streams held open, the
    next request is refused with a 429 that says why."""
    engine.hold_after_first = hold = threading.Event()
    with contextlib.ExitStack() as stack:
        opened = [
            stack.enter_context(sse_stream(url, CHAT, headers, cookies=cookies))
            for _ in range(LIMIT)
        ]
        streams = [response.iter_raw() for response in opened]  # kept: a dropped one hangs up
        try:
            assert all(b"t0 " in next(chunks) for chunks in streams)
            refused = httpx.post(url, json=CHAT, headers=headers, cookies=cookies, timeout=15)
            assert refused.status_code == 429, refused.text  # unenforced past a restart: 200
            assert f"{LIMIT} playground requests" in refused.text, refused.text
        finally:
            hold.set()
        assert all(b"[DONE]" in b"".join(chunks) for chunks in streams)

"""Requests per minute and tokens per day on /v1/ (gateway.ratelimit): on a real redis-server
of the test's own, and through two real web processes that share the counts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis

from controlpanel.models import AuditEvent
from playground import services, token_limits
from playground.gateway import limits, ratelimit
from playground.gateway.ratelimit import Limits
from tests.support.gateway import bearer_for
from tests.support.live_server import start_server, stop_server
from tests.support.private_redis import PrivateRedis
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
NOON_S = 1_764_590_400.0  # 2025-12-01 12:00:00 UTC: a minute's and a day's known offsets


@pytest.fixture
def rate_redis(private_redis: PrivateRedis, settings: Any) -> PrivateRedis:
    settings.REDIS_URL = private_redis.url
    return private_redis


async def test_a_burst_gets_exactly_the_requests_per_minute(rate_redis) -> None:
    limits = Limits(rpm_token=5)
    got = await asyncio.gather(*(ratelimit.admit(1, "abc", NOON_S, limits) for _ in range(20)))
    refused = [r for r in got if r is not None]
    assert len(refused) == 15
    assert refused[0].retry_after_s == 60 and refused[0].kind == "requests"
    assert "your API token: 5 requests per minute (5 made this minute)" in refused[0].message
    assert await ratelimit.admit(1, "abc", NOON_S + 60, limits) is None  # the next minute


async def test_the_user_limit_spans_the_users_tokens_and_sessions(rate_redis) -> None:
    limits = Limits(rpm_token=10, rpm_user=3)
    assert await ratelimit.admit(2, "one", NOON_S + 15, limits) is None
    assert await ratelimit.admit(2, "two", NOON_S + 15, limits) is None
    assert await ratelimit.admit(2, "", NOON_S + 15, limits) is None  # the browser session
    refused = await ratelimit.admit(2, "three", NOON_S + 15, limits)
    assert refused is not None and refused.retry_after_s == 45
    assert "your account: 3 requests per minute" in refused.message
    assert await ratelimit.admit(3, "", NOON_S + 15, limits) is None  # another user


async def test_tokens_per_day_stop_the_next_request(rate_redis, settings) -> None:
    settings.GATEWAY_TOKENS_PER_DAY_PER_USER = 100
    limits = Limits(tokens_day_user=100)
    assert await ratelimit.admit(4, "tok", NOON_S, limits) is None
    await ratelimit.charge(4, "tok", 60, NOON_S)
    assert await ratelimit.admit(4, "", NOON_S, limits) is None  # 60 < 100
    await ratelimit.charge(4, "", 45, NOON_S)
    refused = await ratelimit.admit(4, "tok", NOON_S, limits)
    assert refused is not None and refused.kind == "tokens"
    assert refused.retry_after_s == 12 * 3600  # to the end of the UTC day
    assert "your account: 100 tokens per day (UTC) (105 used today)" in refused.message
    assert await ratelimit.admit(4, "tok", NOON_S + 12 * 3600, limits) is None  # the next day


async def test_redis_down_lets_requests_through_and_says_so(
    rate_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    rate_redis.stop()
    with caplog.at_level(logging.WARNING, "playground.gateway.ratelimit"):
        assert await ratelimit.admit(5, "x", NOON_S, Limits(rpm_user=1)) is None
    assert "rate limits not enforced, Redis unavailable" in caplog.text


# --- two web processes ------------------------------------------------------------------------


@pytest.fixture
def two_servers(
    rate_redis: PrivateRedis, gateway_settings: Any, transactional_db: None
) -> Iterator[Callable[..., list[str]]]:
    """Two web processes started with the limits given (settings are read when they fork)."""
    procs = []

    def start(**limits: int) -> list[str]:
        gateway_settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
        for name, value in limits.items():
            setattr(gateway_settings, name, value)
        procs.extend([start_server(), start_server()])
        return [f"http://127.0.0.1:{p.port.value}" for p in procs]

    yield start
    for proc in procs:
        stop_server(proc)


def _not_near_a_minute_end() -> None:
    """The counts are per UTC minute: start where the test has 20 s before the next one."""
    left = 60 - time.time() % 60
    if left < 20:
        time.sleep(left + 0.5)


def _ask(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=10)


def test_two_web_processes_share_the_counts(
    two_servers, stub, make_deployment, operator, rate_redis
) -> None:
    urls = two_servers(GATEWAY_RPM_PER_TOKEN=4, GATEWAY_RPM_PER_USER=6)
    make_deployment("tiny", stub.port)
    first, second = bearer_for(operator), bearer_for(operator)
    _not_near_a_minute_end()
    codes = [_ask(urls[i % 2], first).status_code for i in range(4)]
    assert codes == [200, 200, 200, 200]
    refused = _ask(urls[1], first)  # the fifth of this token, whichever process
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert "your API token: 4 requests per minute" in error["message"]
    # The same user's other token: the account's 6 a minute are 4 used, 2 left.
    assert [_ask(u, second).status_code for u in urls] == [200, 200]
    account = _ask(urls[0], second)
    assert account.status_code == 429
    assert "your account: 6 requests per minute" in account.json()["error"]["message"]
    rows = wait_for(lambda: list(AuditEvent.objects.filter(detail__status="rate_limited")))
    assert len(rows) == 2 and all(r.detail["http_status"] == 429 for r in rows)
    # A refused request took a concurrency slot side by side with the check: given back.
    client = redis.Redis.from_url(rate_redis.url)
    keys = [limits.slot_key(operator.pk), *client.scan_iter(limits.token_slot_key("*"))]
    assert sum(client.zcard(k) for k in keys) == 0


def test_tokens_per_day_are_counted_from_the_answers(
    two_servers, stub, make_deployment, operator, rate_redis
) -> None:
    urls = two_servers(GATEWAY_TOKENS_PER_DAY_PER_TOKEN=10)
    make_deployment("tiny", stub.port)
    headers = bearer_for(operator)
    client = redis.Redis.from_url(rate_redis.url)
    _not_near_a_minute_end()
    assert _ask(urls[0], headers).status_code == 200
    used = wait_for(lambda: sum(int(client.get(k) or 0) for k in client.keys("*:tpd:t:*")))
    assert used == 8  # the stand-in's usage: 3 prompt + 5 completion tokens
    assert _ask(urls[1], headers).status_code == 200  # 8 < 10
    wait_for(lambda: sum(int(client.get(k) or 0) for k in client.keys("*:tpd:t:*")) == 16)
    refused = _ask(urls[0], headers)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "tokens"
    assert "10 tokens per day (UTC) (16 used today)" in refused.json()["error"]["message"]
    assert int(refused.headers["Retry-After"]) > 0


def test_a_tokens_own_limits_replace_the_global_ones(
    two_servers, stub, make_deployment, operator, admin_user, rate_redis
) -> None:
    """One token held to 2 requests a minute (the setting: 4), another to 5 tokens a day (the
    setting: none), a third on the settings: each process enforces each token's own."""
    urls = two_servers(GATEWAY_RPM_PER_TOKEN=4)
    make_deployment("tiny", stub.port)
    tight, tight_raw = services.token_create(user=operator, name="tight")
    daily, daily_raw = services.token_create(user=operator, name="daily")
    _, plain_raw = services.token_create(user=operator, name="plain")
    token_limits.limits_set(
        user=operator, token_id=tight.pk, rpm_limit=2, tokens_per_day_limit=None
    )
    token_limits.limits_set(user=admin_user, token_id=daily.pk, rpm_limit=None, tokens_per_day_limit=5)  # fmt: skip
    _not_near_a_minute_end()
    bearer = {name: {"Authorization": f"Bearer {raw}"} for name, raw in [("tight", tight_raw), ("daily", daily_raw), ("plain", plain_raw)]}  # fmt: skip
    assert [_ask(urls[i % 2], bearer["tight"]).status_code for i in range(2)] == [200, 200]
    refused = _ask(urls[0], bearer["tight"])
    assert refused.status_code == 429
    assert "your API token: 2 requests per minute" in refused.json()["error"]["message"]
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    assert [_ask(urls[i % 2], bearer["plain"]).status_code for i in range(4)] == [200] * 4
    assert "4 requests per minute" in _ask(urls[1], bearer["plain"]).json()["error"]["message"]
    assert _ask(urls[1], bearer["daily"]).status_code == 200  # 8 tokens charged, 5 allowed
    client = redis.Redis.from_url(rate_redis.url)
    wait_for(lambda: any(int(client.get(k) or 0) == 8 for k in client.keys("*:tpd:t:*")))
    over = _ask(urls[0], bearer["daily"])
    assert over.status_code == 429 and over.json()["error"]["type"] == "tokens", over.text
    assert "5 tokens per day (UTC) (8 used today)" in over.json()["error"]["message"]

"""What the gateway keeps in memory, and how soon a change reaches it (PLAYGROUND_AUTH_CACHE_S).

Changes are made here, in the test process; the server is another process, so only the age
bound of its cache can make it notice, except where the change goes through the server itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group
from django.utils import timezone

from deployments.models import Deployment
from playground import services, tokens
from playground.gateway import access
from playground.gateway.cache import REFRESH_DELAY_S, TtlCache
from tests.support.gateway import session_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
BOUND_S = 2.0  # the default PLAYGROUND_AUTH_CACHE_S, the bound the README states
SLACK_S = 1.0  # a loaded 2-core machine


def _status_after_change(url: str, headers: dict[str, str], change: Callable[[], None]) -> Any:
    """(status codes seen, seconds from the change until the first refusal)."""
    assert httpx.post(url, json=CHAT, headers=headers).status_code == 200  # now in the cache
    change()
    changed_s = time.monotonic()
    while time.monotonic() - changed_s < BOUND_S + SLACK_S:
        r = httpx.post(url, json=CHAT, headers=headers)
        if r.status_code != 200:
            return r, time.monotonic() - changed_s
        time.sleep(0.05)
    raise AssertionError(f"still accepted {BOUND_S + SLACK_S} s after the change")


def _revoke(user: Any, token_id: int) -> Callable[[], None]:
    return lambda: services.token_revoke(user=user, token_id=token_id)


def test_a_revoked_token_stops_working_within_the_bound(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    token, raw = services.token_create(user=operator, name="ci")
    headers = {"Authorization": f"Bearer {raw}"}
    url = f"{server.url}/v1/chat/completions"
    r, after_s = _status_after_change(url, headers, _revoke(operator, token.pk))
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    assert after_s <= BOUND_S + SLACK_S


@pytest.mark.parametrize("change", ["deactivated", "demoted"])
def test_a_user_who_loses_access_is_refused_within_the_bound(
    server: Any, stub: Any, make_deployment: Any, operator: Any, change: str
) -> None:
    make_deployment("tiny", stub.port)
    _, raw = services.token_create(user=operator, name="ci")

    def apply() -> None:
        if change == "deactivated":
            operator.is_active = False
            operator.save(update_fields=["is_active"])
        else:
            operator.groups.set([Group.objects.get_or_create(name="viewer")[0]])

    r, _ = _status_after_change(
        f"{server.url}/v1/chat/completions", {"Authorization": f"Bearer {raw}"}, apply
    )
    assert r.status_code == (401 if change == "deactivated" else 403)


def test_a_stopped_deployment_is_refused_within_the_bound(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    deployment = make_deployment("tiny", stub.port)
    _, raw = services.token_create(user=operator, name="ci")

    def stop() -> None:
        Deployment.objects.filter(pk=deployment.pk).update(status="stopped")

    r, _ = _status_after_change(
        f"{server.url}/v1/chat/completions", {"Authorization": f"Bearer {raw}"}, stop
    )
    assert r.status_code == 409 and "stopped" in r.json()["error"]["message"]


def test_revoking_on_the_page_takes_effect_at_once_in_that_server(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    token, raw = services.token_create(user=operator, name="ci")
    bearer = {"Authorization": f"Bearer {raw}"}
    url = f"{server.url}/v1/chat/completions"
    assert httpx.post(url, json=CHAT, headers=bearer).status_code == 200
    cookies, csrf = session_for(operator)
    revoked = httpx.post(
        f"{server.url}/playground/tokens/{token.pk}/revoke/", cookies=cookies, headers=csrf
    )
    assert revoked.status_code == 200, revoked.text
    assert httpx.post(url, json=CHAT, headers=bearer).status_code == 401


def test_a_new_token_and_a_newly_running_deployment_work_at_once(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    url = f"{server.url}/v1/chat/completions"
    _, raw = services.token_create(user=operator, name="first")
    bearer = {"Authorization": f"Bearer {raw}"}
    assert httpx.post(url, json=CHAT, headers=bearer).status_code == 404  # refusals not kept
    make_deployment("tiny", stub.port)
    assert httpx.post(url, json=CHAT, headers=bearer).status_code == 200
    _, fresh = services.token_create(user=operator, name="second")
    assert httpx.post(url, json=CHAT, headers={"Authorization": f"Bearer {fresh}"}).is_success


# --- the cache itself (pure) ------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


@pytest.mark.parametrize(
    ("ttl_s", "age_s", "kept"),
    [(2.0, 0.0, True), (2.0, 1.99, True), (2.0, 2.0, False), (2.0, 60.0, False), (0.0, 0.0, False)],
)
def test_entries_live_at_most_ttl(ttl_s: float, age_s: float, kept: bool) -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: ttl_s, clock=clock)
    cache.put("k", 1)
    clock.now_s += age_s
    assert (cache.get("k") == 1) is kept


async def test_a_slow_load_keeps_its_value_ttl_from_the_read_not_from_its_end() -> None:
    # A load that waited (a busy database thread) read what it keeps when it started: a
    # deployment stopped just after that read must leave every process ttl_s after it.
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0, clock=clock)

    async def slow_load() -> int:
        clock.now_s += 1.5  # the read happened at 100.0; the answer comes back at 101.5
        return 7

    assert await cache.get_or_load("k", slow_load) == 7
    clock.now_s = 101.99
    assert cache.get("k") == 7
    clock.now_s = 102.0
    assert cache.get("k") is None


def test_the_cache_stays_bounded_and_forgets_on_request() -> None:
    clock = Clock()
    cache: TtlCache[int, int] = TtlCache(ttl_s=lambda: 2.0, max_entries=3, clock=clock)
    for key in range(10):
        cache.put(key, key)
    assert [cache.get(k) for k in range(10)] == [None] * 7 + [7, 8, 9]
    cache.forget(8)
    assert cache.get(8) is None and cache.get(9) == 9


async def test_concurrent_misses_share_one_load_and_a_leaving_waiter_cancels_nobody() -> None:
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0)
    loads, release = 0, asyncio.Event()

    async def load() -> int:
        nonlocal loads
        loads += 1
        await release.wait()
        return 42

    waiters = [asyncio.create_task(cache.get_or_load("k", load)) for _ in range(10)]
    await asyncio.sleep(0.01)
    waiters[0].cancel()  # the first asker's client went away
    release.set()
    results = await asyncio.gather(*waiters[1:])
    assert results == [42] * 9 and loads == 1
    assert cache.get("k") == 42


async def test_a_failed_load_reaches_every_waiter_and_is_not_kept() -> None:
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0)
    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        raise LookupError("no such deployment")

    results = await asyncio.gather(
        *(cache.get_or_load("k", load) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, LookupError) for r in results) and loads == 1
    assert cache.get("k") is None
    with pytest.raises(LookupError):
        await cache.get_or_load("k", load)
    assert loads == 2  # refusals are asked again, not remembered


async def test_a_hit_past_half_its_age_is_answered_now_and_reloaded_behind() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0, clock=clock)
    cache.put("k", 1)
    release, loads = asyncio.Event(), 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        await release.wait()
        return 2

    clock.now_s += 0.9
    assert await cache.get_or_load("k", load) == 1
    await asyncio.sleep(REFRESH_DELAY_S * 2)
    assert loads == 0  # young enough: no reload
    clock.now_s += 0.2
    answers = [await cache.get_or_load("k", load) for _ in range(5)]
    assert answers == [1] * 5  # nobody waited for the reload
    assert loads == 0  # it starts a little later, off this request's first token
    await asyncio.sleep(REFRESH_DELAY_S * 2)
    assert loads == 1  # one reload, however many hits
    release.set()
    await asyncio.sleep(0.01)
    assert cache.get("k") == 2
    clock.now_s += 1.9  # the reloaded entry's own age bound, counted from its reload
    assert cache.get("k") == 2


async def test_a_reload_that_fails_drops_the_entry_at_once() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0, clock=clock)
    cache.put("k", 1)

    async def revoked() -> int:
        raise LookupError("invalid or revoked API token")

    clock.now_s += 1.5
    assert await cache.get_or_load("k", revoked) == 1  # still within the bound: answered
    await asyncio.sleep(REFRESH_DELAY_S * 2)
    assert cache.get("k") is None  # well before the bound: the next request is refused
    with pytest.raises(LookupError):
        await cache.get_or_load("k", revoked)


async def test_an_entry_past_its_age_bound_is_never_answered() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0, clock=clock)
    cache.put("k", 1)

    async def load() -> int:
        return 2

    clock.now_s += 2.0
    assert await cache.get_or_load("k", load) == 2


async def test_a_load_in_flight_when_the_key_is_forgotten_is_not_kept() -> None:
    """A token revoked in this process while its lookup (begun before) is still running."""
    cache: TtlCache[str, int] = TtlCache(ttl_s=lambda: 2.0)
    release = asyncio.Event()

    async def load() -> int:
        await release.wait()
        return 1  # what the lookup read before the revocation

    waiter = asyncio.create_task(cache.get_or_load("k", load))
    await asyncio.sleep(0.01)
    cache.forget("k")
    release.set()
    assert await waiter == 1  # asked before the revocation: answered
    assert cache.get("k") is None  # but not kept for the next request


@pytest.mark.django_db
def test_an_expired_token_is_refused_at_its_expiry_though_it_is_cached(
    operator: Any, settings: Any, rf: Any
) -> None:
    """An expiry is known in advance: the cache's age bound does not delay it."""
    settings.PLAYGROUND_AUTH_CACHE_S = 60
    expires = timezone.now() + timedelta(minutes=5)
    _, raw = services.token_create(user=operator, name="soon", expires_at=expires)
    request = rf.post("/v1/chat/completions", HTTP_AUTHORIZATION=f"Bearer {raw}")
    caller = access.authenticate(request, csrf=False)
    assert caller.expires_ts == expires.timestamp()
    key = tokens.token_hash(raw)
    access.token_callers.put(key, caller)  # as the last request left it
    try:
        assert async_to_sync(access.authenticate_async)(request).user == operator
        with time_machine.travel(expires + timedelta(seconds=1)):
            with pytest.raises(access.AccessError) as refused:
                async_to_sync(access.authenticate_async)(request)
        assert refused.value.status == 401 and "expired" in refused.value.message
        assert access.token_callers.get(key) is None  # dropped, not answered again
    finally:
        access.token_callers.forget(key)

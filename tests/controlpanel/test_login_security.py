"""Log-in throttling, and who is believed about a client's address."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.test import Client

from controlpanel import webserver
from controlpanel.models import AuditEvent
from tests.support.live_server import LiveServer
from tests.support.personas import PASSWORD
from tests.support.private_redis import PrivateRedis

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_failure_counts() -> Iterator[None]:
    """Counts live in Redis and outlive a test database: each test starts from none."""

    def clear() -> None:
        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = list(client.scan_iter(match="*login-fail:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()

    clear()
    yield
    clear()


def log_in(client: Client, username: str, password: str) -> str:
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return response.content.decode() if response.status_code == 200 else "logged in"


def test_an_account_is_refused_after_the_limit_even_with_its_password(
    client: Client, viewer: Any
) -> None:
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        assert "did not match" in log_in(client, viewer.username, "wrong")
    page = log_in(client, viewer.username, PASSWORD)
    assert "Too many failed log-ins for this account" in page
    assert "_auth_user_id" not in client.session
    # Every failure was audited, and the refusal checked no password (no further row).
    failed = AuditEvent.objects.filter(action="auth.login_failed").count()
    assert failed == settings.LOGIN_FAILURE_LIMIT


def test_a_success_clears_the_count_and_others_are_not_locked_out(
    client: Client, viewer: Any, operator: Any
) -> None:
    for _ in range(settings.LOGIN_FAILURE_LIMIT - 1):
        log_in(client, viewer.username, "wrong")
    assert log_in(client, viewer.username, PASSWORD) == "logged in"
    client.logout()
    for _ in range(settings.LOGIN_FAILURE_LIMIT - 1):
        log_in(client, viewer.username, "wrong")
    assert log_in(client, viewer.username, PASSWORD) == "logged in"
    client.logout()
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        log_in(client, viewer.username, "WRONG")
    # The same address, another account: below the address's own, higher limit.
    assert log_in(client, operator.username, PASSWORD) == "logged in"


def test_forwarded_headers_are_believed_only_from_trusted_proxies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert webserver.proxy_options()["proxy_headers"] is False
    monkeypatch.setenv("SHARDBOARD_TRUSTED_PROXIES", "10.0.0.5, 10.1.0.0/16")
    assert webserver.proxy_options() == {
        "proxy_headers": True,
        "forwarded_allow_ips": "10.0.0.5,10.1.0.0/16",
    }


def test_a_forged_forwarded_for_does_not_reach_the_audit(
    asgi_server: LiveServer, viewer: Any
) -> None:
    with httpx.Client(base_url=asgi_server.url) as http:
        form = http.get("/accounts/login/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        assert token
        http.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": token[1],
                "username": viewer.username,
                "password": "wrong",
            },
            headers={"X-Forwarded-For": "203.0.113.9"},
        )
    row = AuditEvent.objects.get(action="auth.login_failed")
    assert row.client_ip == "127.0.0.1"


@pytest.fixture
def redis_stopped_during_password_check(
    private_redis: PrivateRedis, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The throttle's cache on a Redis of the test's own, stopped after the throttle's check
    and while the password is checked: the outage falls between check and count or clear."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": private_redis.url,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 1.0},
        }
    }
    check = ModelBackend.authenticate

    def check_then_stop(self: ModelBackend, *args: Any, **kwargs: Any) -> Any:
        user = check(self, *args, **kwargs)
        private_redis.stop()
        return user

    monkeypatch.setattr(ModelBackend, "authenticate", check_then_stop)


@pytest.mark.usefixtures("redis_stopped_during_password_check")
def test_redis_gone_after_the_check_does_not_fail_a_log_in(
    client: Client, viewer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert log_in(client, viewer.username, PASSWORD) == "logged in"  # a 500 before the fix
    assert "_auth_user_id" in client.session
    assert "not cleared: Redis does not answer" in caplog.text


@pytest.mark.usefixtures("redis_stopped_during_password_check")
def test_redis_gone_after_the_check_still_refuses_a_wrong_password(
    client: Client, viewer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert "did not match" in log_in(client, viewer.username, "wrong")
    assert "not counted: Redis does not answer" in caplog.text

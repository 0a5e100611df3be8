"""A token's own /v1/ limits on the Tokens page: its owner sets them within the global
ceiling, an admin sets any; blank takes the global setting; each change is audited and
shown."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from playground import services
from playground.models import ApiToken, Scope

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def set_limits(client: Client, token: ApiToken, rpm: str, tpd: str) -> str:
    url = f"/tokens/{token.pk}/limits/"
    response = client.post(url, {"rpm_limit": rpm, "tokens_per_day_limit": tpd}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def ceilings(settings: Any) -> Any:
    settings.GATEWAY_RPM_PER_TOKEN = 60
    settings.GATEWAY_TOKENS_PER_DAY_PER_TOKEN = 0  # no global limit
    return settings


def test_an_owner_sets_limits_within_the_ceiling(ceilings: Any, operator: Any) -> None:
    token, _ = services.token_create(user=operator, name="ci", scopes=[Scope.INFER])
    client = logged_in(operator)
    page = client.get("/tokens/").content.decode()
    assert "60 (global)" in page and "none (global)" in page
    page = set_limits(client, token, "10", "50,000")
    token.refresh_from_db()
    assert (token.rpm_limit, token.tokens_per_day_limit) == (10, 50_000)
    assert "Limits of ci: 10 requests per minute, 50,000 tokens per day" in page
    row = AuditEvent.objects.get(action="playground.apitoken.limits")
    assert row.detail == {
        "owner": operator.username,
        "requests_per_minute": 10,
        "per_day": 50_000,
        "max_concurrent": None,
    }
    page = set_limits(client, token, "61", "")
    assert "rpm_limit: at most 60 requests per minute (the global limit per token)" in page
    assert "Admin role" in page
    token.refresh_from_db()
    assert token.rpm_limit == 10  # unchanged
    set_limits(client, token, "", "")
    token.refresh_from_db()
    assert (token.rpm_limit, token.tokens_per_day_limit) == (None, None)


@pytest.mark.parametrize("bad", ["0", "-3", "ten", "1.5", "99999999999"])
def test_a_bad_limit_names_the_field(ceilings: Any, operator: Any, bad: str) -> None:
    token, _ = services.token_create(user=operator, name="ci")
    page = set_limits(logged_in(operator), token, bad, "")
    assert "rpm_limit: give requests per minute as a whole number" in page
    assert ApiToken.objects.get(pk=token.pk).rpm_limit is None


def test_an_admin_sets_anyones_past_the_ceiling_and_others_cannot(
    ceilings: Any, operator: Any, viewer: Any, admin_user: Any
) -> None:
    token, _ = services.token_create(user=operator, name="ci")
    page = set_limits(logged_in(viewer), token, "5", "")
    assert "No such active token of yours" in page
    assert ApiToken.objects.get(pk=token.pk).rpm_limit is None
    page = set_limits(logged_in(admin_user), token, "600", "")
    assert ApiToken.objects.get(pk=token.pk).rpm_limit == 600
    assert AuditEvent.objects.get(action="playground.apitoken.limits").actor_id == admin_user.pk
    assert services.token_revoke(user=operator, token_id=token.pk)
    page = set_limits(logged_in(admin_user), token, "7", "")
    assert "No such active token" in page and ApiToken.objects.get(pk=token.pk).rpm_limit == 600


def test_setting_limits_is_a_post(operator: Any) -> None:
    token, _ = services.token_create(user=operator, name="ci")
    assert logged_in(operator).get(f"/tokens/{token.pk}/limits/").status_code == 405


def test_an_owner_gives_a_token_its_own_concurrency_up_to_the_ceiling(
    operator: Any, settings: Any
) -> None:
    settings.PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING = 16
    token, _ = services.token_create(user=operator, name="harness", scopes=[Scope.INFER])
    client = logged_in(operator)
    url = f"/tokens/{token.pk}/limits/"
    page = client.post(url, {"max_concurrent": "8"}, follow=True).content.decode()
    token.refresh_from_db()
    assert token.max_concurrent == 8
    assert "8 concurrent requests" in page and 'class="concurrency-limit">8<' in page
    assert "up to 16" in page
    page = client.post(url, {"max_concurrent": "17"}, follow=True).content.decode()
    token.refresh_from_db()
    assert token.max_concurrent == 8 and "from 1 to 16" in page
    page = client.post(url, {"max_concurrent": ""}, follow=True).content.decode()
    token.refresh_from_db()
    assert token.max_concurrent is None and 'class="concurrency-limit">4 (global)<' in page
    audits = AuditEvent.objects.filter(action="playground.apitoken.limits").order_by("id")
    assert [a.detail["max_concurrent"] for a in audits] == [8, None]

"""The Tokens page: a user makes tokens with scopes and an expiry (the plain text shown once)
and revokes theirs; an admin sees and revokes anyone's. Every change is audited."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.test import Client
from playwright.sync_api import expect

from controlpanel.models import AuditEvent
from playground import services
from playground.models import ApiToken, Scope
from tests.support.browser import login

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_token_is_made_with_its_scopes_and_expiry_and_shown_once(viewer: Any) -> None:
    client = logged_in(viewer)
    form = {"name": "ci bot", "scopes": ["read", "audit"], "expires_in_days": "30"}
    response = client.post("/tokens/", form)
    assert response.status_code == 302
    page = client.get("/tokens/").content.decode()
    token = ApiToken.objects.get(user=viewer)
    assert token.scope_list == ["audit", "read"] and token.expires_at is not None
    raw = page.split('id="raw-token">')[1].split("<")[0]
    assert raw.startswith("sb-") and raw[:10] == token.prefix
    again = client.get("/tokens/").content.decode()
    assert raw not in again and token.prefix in again and "audit read" in again
    audit = AuditEvent.objects.get(action="playground.apitoken.create")
    assert audit.detail["scopes"] == ["audit", "read"] and audit.actor_id == viewer.pk


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"name": "x", "scopes": ["root"]}, "Select a valid choice"),
        ({"name": "x"}, "This field is required"),
        ({"name": "x", "scopes": ["read"], "expires_in_days": "0"}, "greater than or equal to 1"),
        ({"name": "", "scopes": ["read"]}, "This field is required"),
    ],
)
def test_a_bad_form_says_what_to_change(viewer: Any, form: dict[str, Any], error: str) -> None:
    response = logged_in(viewer).post("/tokens/", form)
    assert response.status_code == 400 and error in response.content.decode()
    assert not ApiToken.objects.exists()


def test_users_revoke_their_own_and_admins_anyones(
    viewer: Any, operator: Any, admin_user: Any
) -> None:
    mine, _ = services.token_create(user=viewer, name="mine", scopes=[Scope.READ])
    theirs, _ = services.token_create(user=operator, name="theirs", scopes=[Scope.READ])
    client = logged_in(viewer)
    assert "theirs" not in client.get("/tokens/").content.decode()
    client.post(f"/tokens/{theirs.pk}/revoke/")
    assert ApiToken.objects.get(pk=theirs.pk).revoked_at is None
    client.post(f"/tokens/{mine.pk}/revoke/")
    assert ApiToken.objects.get(pk=mine.pk).revoked_at is not None
    services.token_create(user=viewer, name="newer", scopes=[Scope.READ])
    admin = logged_in(admin_user)
    listing = admin.get("/tokens/").content.decode()
    assert "theirs" in listing and operator.username in listing
    names = [t.name for t in admin.get("/tokens/").context["tokens"]]
    assert names == ["newer", "theirs", "mine"]  # live ones first, newest first
    admin.post(f"/tokens/{theirs.pk}/revoke/")
    assert ApiToken.objects.get(pk=theirs.pk).revoked_at is not None
    audit = AuditEvent.objects.filter(action="playground.apitoken.revoke").order_by("-id")[0]
    assert audit.actor_id == admin_user.pk and audit.detail["owner"] == operator.username


def test_strangers_go_to_the_login_page() -> None:
    response = Client().get("/tokens/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.browser
def test_make_use_and_revoke_a_token_in_the_browser(
    asgi_server: Any, operator: Any, page: Any
) -> None:
    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/tokens/")
    page.fill("input[name=name]", "laptop")
    page.check("input[name=scopes][value=read]")
    page.click("#token-form button[type=submit]")
    raw = page.locator("#raw-token").inner_text()
    assert raw.startswith("sb-")
    row = page.locator("#token-table tbody tr", has_text="laptop")
    expect(row.locator(".state")).to_have_text("active")
    url = f"{asgi_server.url}/api/v1/deployments"
    headers = {"Authorization": f"Bearer {raw}"}
    assert httpx.get(url, headers=headers, timeout=20).status_code == 200
    assert httpx.get(f"{asgi_server.url}/v1/models", headers=headers, timeout=20).status_code == 403
    page.reload()
    expect(row.locator(".last-used")).not_to_have_text("never")
    expect(row.locator(".rpm-limit")).to_have_text("none (global)")
    row.locator("input[name=rpm_limit]").fill("12")
    row.locator("input[name=tokens_per_day_limit]").fill("3000")
    row.locator("button.set-limits").click()
    expect(page.locator(".messages")).to_contain_text(
        "12 requests per minute, 3,000 tokens per day"
    )
    expect(row.locator(".rpm-limit")).to_have_text("12")
    expect(row.locator(".tpd-limit")).to_have_text("3,000")
    assert ApiToken.objects.get(name="laptop").rpm_limit == 12
    row.locator("button.revoke").click()
    expect(page.locator(".messages")).to_contain_text("Token revoked")
    expect(page.locator("#token-table tbody tr", has_text="laptop").locator(".state")).to_have_text(
        "revoked"
    )
    assert raw not in page.content()
    assert httpx.get(url, headers=headers, timeout=20).status_code == 401

"""Playwright driving Debian's chromium against the real ASGI server."""

import pytest

from tests.support.browser import login

pytestmark = [pytest.mark.browser]


def test_admin_logs_in_and_sees_dashboard(page, asgi_server, admin_user) -> None:
    login(page, asgi_server, admin_user.username)
    assert page.locator("h1").inner_text() == "Dashboard"
    assert page.locator("nav a[data-nav=audit]").is_visible()
    page.click("nav a[data-nav=audit]")
    assert page.locator("h1").inner_text() == "Audit trail"
    assert "auth.login" in page.locator("#audit-table").inner_text()


def test_viewer_has_no_audit_link_and_gets_403(page, asgi_server, viewer) -> None:
    login(page, asgi_server, viewer.username)
    assert page.locator("nav a[data-nav=dashboard]").is_visible()
    assert page.locator("nav a[data-nav=audit]").count() == 0
    response = page.goto(f"{asgi_server.url}/audit/")
    assert response.status == 403
    assert "Not allowed" in page.content()


def test_wrong_password_shows_message(page, asgi_server, viewer) -> None:
    page.goto(f"{asgi_server.url}/accounts/login/")
    page.fill("input[name=username]", viewer.username)
    page.fill("input[name=password]", "nope")
    page.click("button[type=submit]")
    assert "did not match" in page.locator("[role=alert]").inner_text()

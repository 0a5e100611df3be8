"""The API docs page in a real browser: Swagger UI renders every operation from our schema,
and no request leaves this server (no CDN), without a console error."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.support.browser import login

pytestmark = pytest.mark.browser


def test_the_docs_page_renders_offline(asgi_server: Any, viewer: Any, page: Any) -> None:
    hosts: set[str] = set()
    errors: list[str] = []
    page.on("request", lambda r: hosts.add(urlsplit(r.url).netloc))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    login(page, asgi_server, viewer.username)
    page.goto(f"{asgi_server.url}/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Shardboard API")
    schema = page.request.get(f"{asgi_server.url}/api/v1/openapi.json").json()
    operations = sum(len(methods) for methods in schema["paths"].values())
    assert operations >= 17  # the deployments, plan, adapters, tokens, ... routes
    expect(page.locator(".opblock")).to_have_count(operations)
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/deployments/{pk}/scale")).to_be_visible()  # fmt: skip
    assert hosts == {urlsplit(asgi_server.url).netloc}
    assert errors == []

"""The browser side: where Debian's chromium is and how a persona logs in."""

from __future__ import annotations

from typing import Any

from tests.support.live_server import LiveServer
from tests.support.personas import PASSWORD

CHROMIUM = "/usr/bin/chromium"


def login(page: Any, server: LiveServer, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

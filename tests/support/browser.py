"""The browser side: where Debian's chromium is and how a persona logs in."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from asgiref.sync import AsyncToSync

from tests.support.live_server import LiveServer
from tests.support.personas import PASSWORD

CHROMIUM = "/usr/bin/chromium"
_plain_async_to_sync = AsyncToSync.__call__


def _async_to_sync_off_the_loop(self: AsyncToSync[Any, Any], *args: Any, **kwargs: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _plain_async_to_sync(self, *args, **kwargs)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_plain_async_to_sync, self, *args, **kwargs).result()


@contextmanager
def sync_calls_beside_playwright() -> Iterator[None]:
    """Playwright's sync API keeps its event loop marked running on the test's thread between
    steps, so asgiref refuses async_to_sync there: a test's own ORM call that pushes to the
    channel layer on commit (a user saved, a deployment moved) would log "You cannot use
    AsyncToSync in the same thread as an async event loop" and its push be lost. While the
    browser is open, such a call runs on a thread of its own, as it does in a web process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AsyncToSync, "__call__", _async_to_sync_off_the_loop)
        yield


def login(page: Any, server: LiveServer, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

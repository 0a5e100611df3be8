"""A test's own ORM calls while the browser is open push to the channel layer as a web
process's do (Playwright keeps an event loop marked running on the test's thread)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from channels.layers import get_channel_layer

from controlpanel.consumers import access_group

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_role_change_made_beside_the_browser_reaches_open_sockets(
    page: Any, viewer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    layer = get_channel_layer()
    heard: list[dict[str, Any]] = []
    joined = threading.Event()

    async def listen() -> None:  # an open socket of the viewer's, on a loop of its own
        channel = await layer.new_channel()
        await layer.group_add(access_group(viewer.pk), channel)
        joined.set()
        heard.append(await asyncio.wait_for(layer.receive(channel), 10))

    socket = threading.Thread(target=lambda: asyncio.run(listen()))
    socket.start()
    assert joined.wait(10)
    viewer.first_name = "Vera"
    viewer.save()  # told on commit: refused with an error logged before the fix
    socket.join(15)
    assert heard == [{"type": "access.changed"}]
    assert "AsyncToSync" not in caplog.text

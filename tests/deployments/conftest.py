"""Fixtures of the catalog and lifecycle tests: the Hub stand-in wired into Django."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deployments.catalog.hubaccess import _shared_client
from tests.support.catalog import LLAMA, TOKEN, clear_hub_cache
from tests.support.hubstub import HubStub


@pytest.fixture
def hub(settings: Any) -> Iterator[HubStub]:
    """The stand-in, with Django pointed at it; request it before `asgi_server` (fork)."""
    stub = HubStub(tokens={TOKEN: {LLAMA}}).start()
    settings.HF_ENDPOINT = stub.url
    settings.HF_TOKEN = ""
    clear_hub_cache()
    _shared_client.cache_clear()
    yield stub
    stub.stop()
    _shared_client.cache_clear()
    clear_hub_cache()

"""Fixtures of the catalog and lifecycle tests: the Hub stand-in wired into Django."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.hubaccess import _shared_client
from tests.support.catalog import LLAMA, TOKEN, clear_hub_cache
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import serve_tiny


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


@pytest.fixture
def served(hub: HubStub, tiny_model: Path, tmp_path: Path) -> HubStub:
    """The stand-in also serving the tiny model's files whole (tests.support.hubstub.served)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    serve_tiny(hub, tiny_model, scratch)
    return hub

"""Fixtures of the deployments tests: the Hub stand-in wired into Django; a tiny model and an
HF_HOME of the session, for the engine tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.demo_model import make_tiny_llama
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


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("hf-home")
    (home / "hub").mkdir()
    return home

"""Fixtures of the Hub client tests: the stand-in on its own, in-memory stores, a clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deployments.catalog.hub import HubClient, MemoryConfigStore, MemoryTtlStore
from tests.support.catalog import GEMMA, GRANTED, LLAMA, UNGRANTED
from tests.support.clock import Clock
from tests.support.hubstub import HubStub


@pytest.fixture
def stub() -> Iterator[HubStub]:
    hub = HubStub(tokens={GRANTED: {LLAMA, GEMMA}, UNGRANTED: set()}, page_cap=4).start()
    yield hub
    hub.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache() -> MemoryTtlStore:
    return MemoryTtlStore()


@pytest.fixture
def configs() -> MemoryConfigStore:
    return MemoryConfigStore()


@pytest.fixture
def client(
    stub: HubStub, cache: MemoryTtlStore, configs: MemoryConfigStore, clock: Clock
) -> HubClient:
    return HubClient(endpoint=stub.url, cache=cache, config_store=configs, clock=clock, timeout_s=5)


@pytest.fixture
def offline_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE is read once at import, so the constant is what must change."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

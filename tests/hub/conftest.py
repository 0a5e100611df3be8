from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from deployments.catalog.hub import HubClient, MemoryConfigStore, MemoryTtlStore
from tests.hubstub import HubStub

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GEMMA = "google/gemma-2-9b-it"
GRANTED = "hf_granted_token_1234567890"
UNGRANTED = "hf_ungranted_token_0987654321"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


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

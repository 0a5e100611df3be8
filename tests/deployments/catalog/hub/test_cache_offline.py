from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from deployments.catalog.hub import (
    HubClient,
    HubRateLimitedError,
    HubUnreachableError,
    MemoryConfigStore,
    MemoryTtlStore,
    client_from_settings,
)
from tests.support.catalog import GRANTED
from tests.support.clock import Clock
from tests.support.hubstub import HubStub

PHI = "microsoft/phi-2"


def test_second_search_makes_no_request(client: HubClient, stub: HubStub) -> None:
    first = client.search("qwen", sort="likes")
    calls = stub.count()
    second = client.search("qwen", sort="likes")
    assert stub.count() == calls
    assert second.items == first.items
    assert (second.from_cache, second.cached_at) == (True, first.cached_at)
    assert second.freshness.offline is False
    client.search("qwen", sort="downloads")  # another query is another entry
    assert stub.count() == calls + 1


def test_second_model_info_and_config_make_no_request(client: HubClient, stub: HubStub) -> None:
    card = client.model_info(PHI)
    calls = stub.count()
    again = client.model_info(PHI)
    assert again.from_cache is True and again.parameters == card.parameters
    assert client.config(PHI) == card.config  # revision -> sha from the cached card
    assert client.config(PHI, card.sha) == card.config
    assert stub.count() == calls


def test_config_store_is_shared_across_clients(stub: HubStub, configs: MemoryConfigStore) -> None:
    sha = stub.repos[PHI].refs["main"]
    HubClient(endpoint=stub.url, config_store=configs).config(PHI)
    calls = stub.count()
    fresh_cache = HubClient(endpoint=stub.url, config_store=configs)
    assert fresh_cache.config(PHI, sha)["model_type"] == "phi"
    assert stub.count() == calls


def test_stale_entry_is_refetched_when_online(
    client: HubClient, stub: HubStub, clock: Clock
) -> None:
    client.model_info(PHI)
    clock.advance(3601)
    calls = stub.count("/api/models/")
    card = client.model_info(PHI)
    assert stub.count("/api/models/") == calls + 1
    assert card.from_cache is False and card.cached_at == clock.now


def test_hub_down_serves_cached_marked_offline(
    client: HubClient, stub: HubStub, clock: Clock
) -> None:
    page = client.search("phi")
    card = client.model_info(PHI)
    stub.stop()
    clock.advance(7 * 24 * 3600)  # long stale: only kept for offline use
    offline_page = client.search("phi")
    offline_card = client.model_info(PHI)
    assert [i.repo_id for i in offline_page.items] == [i.repo_id for i in page.items]
    assert offline_page.items[0].context_length == 2048  # config.json stored meanwhile
    assert offline_page.freshness.offline is True
    assert offline_page.cached_at == page.cached_at
    assert offline_card.freshness.offline and offline_card.cached_at == card.cached_at
    assert client.config(PHI)["model_type"] == "phi"


def test_hub_down_with_nothing_cached(client: HubClient, stub: HubStub) -> None:
    stub.stop()
    started = time.monotonic()
    with pytest.raises(HubUnreachableError, match="Hub unreachable") as caught:
        client.model_info(PHI)
    assert caught.value.offline_mode is False
    with pytest.raises(HubUnreachableError, match="Hub unreachable"):
        client.search("phi")
    with pytest.raises(HubUnreachableError):
        client.config(PHI)
    assert time.monotonic() - started < 5  # one attempt each, no back-off


@pytest.mark.usefixtures("offline_mode")
def test_offline_mode_serves_cache_without_requests(
    stub: HubStub, cache: MemoryTtlStore, configs: MemoryConfigStore, clock: Clock
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        import huggingface_hub.constants

        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        online = HubClient(endpoint=stub.url, cache=cache, config_store=configs, clock=clock)
        online.model_info(PHI)
    stub.reset_requests()
    client = HubClient(endpoint=stub.url, cache=cache, config_store=configs, clock=clock)
    card = client.model_info(PHI)
    assert card.freshness.offline is True and card.from_cache is True
    assert client.config(PHI)["max_position_embeddings"] == 2048
    with pytest.raises(HubUnreachableError, match="HF_HUB_OFFLINE") as caught:
        client.model_info("Qwen/Qwen3-14B")
    assert caught.value.offline_mode is True
    with pytest.raises(HubUnreachableError, match="HF_HUB_OFFLINE"):
        client.search("anything")
    assert stub.count() == 0


def test_rate_limited_without_cache(client: HubClient, stub: HubStub) -> None:
    stub.rate_limited = True
    started = time.monotonic()
    with pytest.raises(HubRateLimitedError, match="rate-limiting") as caught:
        client.search("qwen")
    assert caught.value.retry_after_s == 42
    with pytest.raises(HubRateLimitedError):
        client.model_info(PHI)
    assert time.monotonic() - started < 5  # huggingface_hub's own retry loop is bypassed


def test_rate_limited_serves_stale_cache(client: HubClient, stub: HubStub, clock: Clock) -> None:
    page = client.search("qwen")
    clock.advance(601)
    stub.rate_limited = True
    again = client.search("qwen")
    assert again.items == page.items and again.freshness.offline is True


def test_cache_is_partitioned_by_token(client: HubClient, stub: HubStub) -> None:
    client.model_info(PHI, token=GRANTED)
    calls = stub.count()
    client.model_info(PHI)
    assert stub.count() == calls + 1


def test_client_from_settings(stub: HubStub) -> None:
    settings = SimpleNamespace(HF_ENDPOINT=stub.url, HF_TOKEN=GRANTED, HF_CACHE_TTL_S=60)
    client = client_from_settings(
        settings, cache=MemoryTtlStore(), config_store=MemoryConfigStore()
    )
    assert client.config("meta-llama/Llama-3.1-8B-Instruct")["model_type"] == "llama"


def test_cache_entries_are_per_endpoint(stub: HubStub, cache: MemoryTtlStore) -> None:
    """Pointing HF_ENDPOINT at another Hub (a mirror, an internal hub) must not serve the first
    Hub's cached answers."""
    other = HubStub(tokens={}, page_cap=4).start()
    try:
        HubClient(endpoint=stub.url, cache=cache).search("qwen", sort="likes")
        calls = other.count()
        HubClient(endpoint=other.url, cache=cache).search("qwen", sort="likes")
        assert other.count() == calls + 1
        HubClient(endpoint=stub.url, cache=cache).model_info(PHI)
        calls = other.count()
        HubClient(endpoint=other.url, cache=cache).model_info(PHI)
        assert other.count() > calls
    finally:
        other.stop()

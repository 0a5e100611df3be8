"""The Models page against the Hub stand-in: search, filters, sort, paging, cache, errors."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from deployments.models import CachedModel
from tests.support.catalog import QWEN, login_client
from tests.support.hosts import sim_host
from tests.support.hubstub import HubStub

CARD = re.compile(r'<article class="model-card" data-model="([^"]+)"')


def names(html: str) -> list[str]:
    return CARD.findall(html)


def hub_names(html: str) -> list[str]:
    """Cards of the search results only (the local models section comes after them)."""
    return names(html.split('id="local-models"')[0])


def test_search_text_and_gguf_excluded(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    html = client.get("/models/", {"q": "llama"}).content.decode()
    found = hub_names(html)
    assert found and all("llama" in n.lower() for n in found)
    assert "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF" not in found
    assert "Qwen" not in " ".join(found)


def test_filters(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)

    def search(**params: str) -> list[str]:
        response = client.get("/models/", params)
        assert response.status_code == 200
        return hub_names(response.content.decode())

    assert search(quantization="awq") == ["Qwen/Qwen2.5-7B-Instruct-AWQ"]
    assert search(quantization="fp8") == ["RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"]
    assert set(search(gated="yes")) == {"meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it"}
    assert search(license="mit") == ["microsoft/phi-2"]
    big = search(min_b="10")
    assert set(big) == {
        "Qwen/Qwen3-14B",
        "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
    }
    assert search(min_b="5", max_b="8") == [QWEN]
    open_models = set(search(gated="no"))
    assert QWEN in open_models
    assert not open_models & {"meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it"}


def test_sort_changes_order(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    by_downloads = hub_names(client.get("/models/", {"sort": "downloads"}).content.decode())
    by_likes = hub_names(client.get("/models/", {"sort": "likes"}).content.decode())
    assert sorted(by_downloads) == sorted(by_likes)
    assert by_downloads != by_likes


def test_card_fields_and_badges(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    html = client.get("/models/", {"q": "Llama-3.1-8B"}).content.decode()
    card = html.split('data-model="meta-llama/Llama-3.1-8B-Instruct"')[1].split("</article>")[0]
    assert "data-gated" in card
    assert '<dd data-field="parameters">8.03B</dd>' in card
    assert '<dd data-field="size">15.0 GiB</dd>' in card


def test_pagination_links(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    first = client.get("/models/").content.decode()
    assert "data-page=" not in first  # 8 models fit on one page of 20
    second = client.get("/models/", {"page": "2"}).content.decode()
    assert hub_names(second) == []
    assert 'data-page="1"' in second and "data-empty" in second


def test_fragment_endpoint(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    response = client.get("/models/results/", {"q": "qwen3"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert names(html) == ["Qwen/Qwen3-14B"]


def test_second_search_served_from_cache(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    first = client.get("/models/", {"q": "phi"}).content.decode()
    calls = hub.count("/api/models")
    assert "data-cached" not in first
    second = client.get("/models/", {"q": "phi"}).content.decode()
    assert hub.count("/api/models") == calls
    assert "Cached since" in second and hub_names(second) == ["microsoft/phi-2"]


def test_hub_errors_become_messages(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    hub.rate_limited = True
    response = client.get("/models/", {"q": "mistral"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "data-hub-error" in html and "rate-limiting" in html and "Retry in about 42 s" in html
    assert "Traceback" not in html
    hub.rate_limited = False
    hub.stop()
    html = client.get("/models/", {"q": "never-searched"}).content.decode()
    assert "Hub unreachable" in html and "Try again when the network is back" in html


def test_bad_filter_is_a_message(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    response = client.get("/models/", {"sort": "random", "min_b": "lots"})
    assert response.status_code == 200
    assert "Check the filters" in response.content.decode()
    assert hub.count("/api/models") == 0


def test_anonymous_goes_to_login(client: Client, hub: HubStub) -> None:
    response = client.get("/models/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_cards_say_which_hosts_hold_the_model(client: Client, viewer: Any, hub: HubStub) -> None:
    for name, complete in (("gpu-b", True), ("gpu-a", True), ("gpu-c", False)):
        CachedModel.objects.create(
            host=sim_host(name, 1), repo_id="microsoft/phi-2", commit="c" * 40, complete=complete
        )
    login_client(client, viewer)
    html = client.get("/models/", {"license": "mit"}).content.decode()
    card = html.split('data-model="microsoft/phi-2"')[1].split("</article>")[0]
    # whole copies only, in name order; a partial download does not count
    assert '<dd data-field="on-hosts">gpu-a, gpu-b</dd>' in card
    html = client.get("/models/", {"quantization": "awq"}).content.decode()
    card = html.split('data-model="Qwen/Qwen2.5-7B-Instruct-AWQ"')[1].split("</article>")[0]
    assert "none yet" in card

from __future__ import annotations

import pytest

from deployments.catalog.hub import HubClient
from tests.support.catalog import GEMMA, LLAMA
from tests.support.hubstub import HubStub

BY_DOWNLOADS = [
    "Qwen/Qwen2.5-7B-Instruct",
    LLAMA,
    "Qwen/Qwen3-14B",
    "microsoft/phi-2",
    GEMMA,
    "Qwen/Qwen2.5-7B-Instruct-AWQ",
    "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
    "deepseek-ai/DeepSeek-V2-Lite-Chat",
]


def ids(page) -> list[str]:
    return [item.repo_id for item in page.items]


def test_default_search_is_text_generation_by_downloads_without_gguf(client: HubClient) -> None:
    page = client.search()
    assert ids(page) == BY_DOWNLOADS
    assert "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF" not in ids(page)
    assert page.has_next is False
    assert page.from_cache is False


def test_query_is_sent_to_the_hub(client: HubClient, stub: HubStub) -> None:
    page = client.search("qwen2.5")
    assert ids(page) == ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct-AWQ"]
    sent = stub.requests[0].query
    assert sent["search"] == ["qwen2.5"]
    assert sent["pipeline_tag"] == ["text-generation"]


@pytest.mark.parametrize(
    ("sort", "first_three"),
    [
        ("likes", [LLAMA, "microsoft/phi-2", "Qwen/Qwen2.5-7B-Instruct"]),
        ("trending", ["Qwen/Qwen3-14B", LLAMA, "Qwen/Qwen2.5-7B-Instruct"]),
        (
            "updated",
            [
                "Qwen/Qwen3-14B",
                "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
                "Qwen/Qwen2.5-7B-Instruct",
            ],
        ),
    ],
)
def test_sort_orders(client: HubClient, sort: str, first_three: list[str]) -> None:
    assert ids(client.search(sort=sort))[:3] == first_three  # type: ignore[arg-type]


def test_parameter_range(client: HubClient, stub: HubStub) -> None:
    page = client.search(min_params=7 * 10**9, max_params=10 * 10**9)
    assert sorted(ids(page)) == sorted(["Qwen/Qwen2.5-7B-Instruct", LLAMA, GEMMA])
    assert stub.requests[0].query["num_parameters"] == ["min:7B,max:10B"]


@pytest.mark.parametrize(
    ("quantization", "expected"),
    [
        ("awq", ["Qwen/Qwen2.5-7B-Instruct-AWQ"]),
        ("fp8", ["RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"]),
        ("gptq", []),
        ("none", [m for m in BY_DOWNLOADS if "AWQ" not in m and "FP8" not in m]),
        ("any", BY_DOWNLOADS),
    ],
)
def test_quantization_filter(client: HubClient, quantization: str, expected: list[str]) -> None:
    assert ids(client.search(quantization=quantization)) == expected  # type: ignore[arg-type]


def test_license_filter(client: HubClient, stub: HubStub) -> None:
    page = client.search(license="apache-2.0")
    assert ids(page) == [
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen3-14B",
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
    ]
    assert stub.requests[0].query["filter"] == ["license:apache-2.0"]
    assert all(item.license == "apache-2.0" for item in page.items)


def test_gated_filter(client: HubClient) -> None:
    assert ids(client.search(gated=True)) == [LLAMA, GEMMA]
    assert set(ids(client.search(gated=False))) == set(BY_DOWNLOADS) - {LLAMA, GEMMA}


def test_pagination_follows_link_header(client: HubClient, stub: HubStub) -> None:
    pages = [client.search(page=n, page_size=3) for n in (1, 2, 3)]
    assert [ids(p) for p in pages] == [BY_DOWNLOADS[0:3], BY_DOWNLOADS[3:6], BY_DOWNLOADS[6:]]
    assert [p.has_next for p in pages] == [True, True, False]
    # The stand-in serves at most 4 items a page: page 3 needed the Link "next" cursor.
    assert any("cursor" in r.query for r in stub.requests)
    assert client.search(page=4, page_size=3).items == ()


def test_summary_fields(client: HubClient) -> None:
    (item,) = client.search("Qwen3-14B").items
    assert item.parameters == 14768307200
    assert item.parameters_by_dtype == {"BF16": 14768307200}
    assert item.weights_bytes_estimate == 2 * 14768307200
    assert item.architecture == "Qwen3ForCausalLM"
    assert item.license == "apache-2.0"
    assert item.gated is False
    assert (item.downloads, item.likes) == (1050000, 310)
    assert item.last_modified is not None and item.last_modified.year == 2025
    assert item.context_length is None  # config.json not fetched yet


def test_context_length_appears_once_config_is_known(client: HubClient) -> None:
    client.config("Qwen/Qwen3-14B")
    (item,) = client.search("Qwen3-14B").items
    assert item.context_length == 40960


@pytest.mark.parametrize(
    "kwargs",
    [{"sort": "stars"}, {"quantization": "gguf"}, {"page": 0}, {"page_size": 500}],
)
def test_invalid_arguments(client: HubClient, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        client.search(**kwargs)

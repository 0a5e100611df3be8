from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from deployments.catalog.hub import (
    HubClient,
    HubEntryNotFoundError,
    HubGatedError,
    HubNotFoundError,
    HubRevisionNotFoundError,
    HubUnauthorizedError,
)
from deployments.planning import ModelSpec
from tests.support.catalog import GEMMA, GRANTED, LLAMA, UNGRANTED
from tests.support.hubstub import HubStub
from tests.support.hubstub.repos import RepoFile

QWEN = "Qwen/Qwen2.5-7B-Instruct"
AWQ = "Qwen/Qwen2.5-7B-Instruct-AWQ"
FP8 = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
GGUF = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"


def shard_bytes(stub: HubStub, repo_id: str) -> int:
    files = stub.repos[repo_id].files.values()
    return sum(f.size for f in files if f.name.endswith(".safetensors"))


def test_card_fields(client: HubClient, stub: HubStub) -> None:
    card = client.model_info(QWEN)
    assert card.sha == stub.repos[QWEN].refs["main"]
    assert card.parameters == 7615616512
    assert card.parameters_by_dtype == {"BF16": 7615616512}
    assert card.weights_bytes == shard_bytes(stub, QWEN)
    assert card.weight_files == 4
    assert card.architecture == "Qwen2ForCausalLM"
    assert card.model_type == "qwen2"
    assert card.context_length == 32768
    assert card.dtype == "bfloat16"
    assert card.quantization is None
    assert card.license == "apache-2.0"
    assert (card.gated, card.gate_mode) == (False, None)
    assert card.last_modified == datetime(2025, 1, 12, 2, 10, 11, tzinfo=UTC)
    assert (card.downloads, card.likes) == (7100000, 780)
    assert card.config is not None and card.config["num_hidden_layers"] == 28
    assert card.config_error is None
    assert card.url == f"{stub.url}/{QWEN}"


def test_parameters_from_safetensors_headers_when_hub_has_none(
    client: HubClient, stub: HubStub
) -> None:
    assert "safetensors" not in stub.repos[AWQ].info  # the Hub computed no counts for it
    card = client.model_info(AWQ)
    assert card.parameters_by_dtype == {"I32": 822788096, "F16": 1140720128}
    assert card.parameters == 822788096 + 1140720128
    assert card.quantization == "awq"
    assert card.quantization_config is not None and card.quantization_config["bits"] == 4
    assert card.dtype == "float16"
    # the index, then one ranged read of each of the two shard headers
    assert stub.count(f"/{AWQ}/resolve/", method="GET") == 4


def test_fp8_compressed_tensors_and_mla_context(client: HubClient) -> None:
    fp8 = client.model_info(FP8)
    assert fp8.quantization == "fp8"
    assert fp8.parameters_by_dtype["F8_E4M3"] == 68451041280
    assert fp8.context_length == 131072
    assert client.model_info("deepseek-ai/DeepSeek-V2-Lite-Chat").context_length == 163840


def test_config_fetch(client: HubClient, stub: HubStub) -> None:
    config = client.config("microsoft/phi-2")
    assert config["architectures"] == ["PhiForCausalLM"]
    assert config["max_position_embeddings"] == 2048
    assert stub.count("/microsoft/phi-2/resolve/main/config.json") == 1


def test_config_at_a_commit_sha(client: HubClient, stub: HubStub, configs) -> None:
    sha = stub.repos[QWEN].refs["main"]
    assert client.config(QWEN, sha)["model_type"] == "qwen2"
    assert configs.get(QWEN, sha) is not None


def test_gated_without_token(client: HubClient) -> None:
    card = client.model_info(LLAMA)  # the card itself is public on the Hub
    assert (card.gated, card.gate_mode) == (True, "manual")
    assert card.parameters == 8030261248
    assert card.config is None
    assert card.config_error is not None and "request access" in card.config_error
    with pytest.raises(HubGatedError) as caught:
        client.config(LLAMA)
    assert "request access on" in caught.value.message
    assert "set a Hub token" in caught.value.message
    assert caught.value.code == "gated"


def test_gated_with_a_token_that_has_access(
    client: HubClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    card = client.model_info(GEMMA, token=GRANTED)
    assert card.config is not None and card.context_length == 8192
    assert client.config(LLAMA, token=GRANTED)["max_position_embeddings"] == 131072
    assert GRANTED not in caplog.text


def test_gated_with_a_token_without_access(client: HubClient) -> None:
    with pytest.raises(HubGatedError, match="has not been granted access"):
        client.config(LLAMA, token=UNGRANTED)


def test_settings_token_is_used_and_never_shown(stub: HubStub) -> None:
    client = HubClient(endpoint=stub.url, token=GRANTED)
    assert client.config(LLAMA)["model_type"] == "llama"
    assert GRANTED not in repr(client)


def test_invalid_token(client: HubClient) -> None:
    with pytest.raises(HubUnauthorizedError, match="rejected the token"):
        client.model_info(QWEN, token="hf_not_a_real_token")


def test_repository_not_found(client: HubClient) -> None:
    with pytest.raises(HubNotFoundError, match="No model nobody/nothing") as caught:
        client.model_info("nobody/nothing")
    assert caught.value.repo_id == "nobody/nothing"
    with pytest.raises(HubNotFoundError):
        client.config("nobody/nothing")


def test_revision_not_found(client: HubClient) -> None:
    with pytest.raises(HubRevisionNotFoundError, match="no revision 'v9'"):
        client.model_info(QWEN, "v9")
    with pytest.raises(HubRevisionNotFoundError):
        client.config(QWEN, "v9")


def test_gguf_repo_has_no_config(client: HubClient) -> None:
    card = client.model_info(GGUF)
    assert card.config is None
    assert card.config_error is not None and "GGUF" in card.config_error
    assert card.context_length == 131072  # from the Hub's GGUF metadata
    with pytest.raises(HubEntryNotFoundError):
        client.config(GGUF)


def test_endpoint_from_hf_endpoint(stub: HubStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    client = HubClient()
    assert client.endpoint == stub.url
    assert client.model_info("microsoft/phi-2").parameters == 2779683840


def test_modelopt_hf_quant_config_is_read_beside_config_json(
    client: HubClient, stub: HubStub
) -> None:
    quant = {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16},
    }
    content = json.dumps(quant).encode()
    name = "hf_quant_config.json"
    stub.repos[QWEN].files[name] = RepoFile(name, content, len(content), lfs=False)
    card = client.model_info(QWEN)
    assert card.config is not None
    assert card.config["quantization_config"]["quantization"]["quant_algo"] == "NVFP4"
    spec = ModelSpec.from_config(card.config)
    assert spec.quant is not None and spec.quant.method == "modelopt_fp4"
    assert stub.count(f"/{QWEN}/resolve/{card.sha}/{name}") == 1


def test_no_hf_quant_config_no_request(client: HubClient, stub: HubStub) -> None:
    client.model_info(QWEN)
    assert not any(r.path.endswith("/hf_quant_config.json") for r in stub.requests)

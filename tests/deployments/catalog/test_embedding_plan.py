"""A local sentence-transformers folder on the model page and the plan endpoint: named an
embedding model, planned without KV rows, its vLLM command with the pooling runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from deployments.catalog.sources import load_spec, resolve_source
from tests.support.catalog import login_client
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import folder_repo

BERT = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "torch_dtype": "float32",
}
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]


@pytest.fixture
def embed_root(tmp_path: Path, settings: Any) -> Path:
    folder = tmp_path / "models" / "minilm"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(BERT))
    (folder / "modules.json").write_text(json.dumps(MODULES))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    # vLLM's max_model_len for it (config/model.py:2636-2637), not the 512 positions
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256}))
    settings.MODEL_ROOTS = [tmp_path / "models"]
    return folder


@pytest.mark.django_db
def test_plan_endpoint_shows_an_encoder_without_kv(
    client: Client, viewer: Any, embed_root: Path
) -> None:
    login_client(client, viewer)
    query = {"ref": "local:0/minilm", "target": "whatif", "gpus": "1x80GiB"}
    data = client.get("/models/plan/", query).json()
    assert data["ok"], data
    p = data["plan"]
    assert p["model_kind"].startswith("embedding model (an encoder: no KV cache")
    assert p["no_kv"] and p["kv_cache_tokens"] == 0
    assert p["max_model_len"] == 256 and p["max_concurrency"] == 8192 // 256
    assert "KV cache" not in [part["name"] for part in p["chart"]["parts"]]
    assert all(g["kv_cache_bytes"] == 0 for g in p["per_gpu"])
    assert "--runner pooling" in p["commands"]["vllm"]
    assert p["engine_settings"]["gpu_memory_utilization"] < 0.05


@pytest.mark.django_db
def test_model_page_says_embedding_model(client: Client, viewer: Any, embed_root: Path) -> None:
    login_client(client, viewer)
    html = client.get("/models/local/0/minilm/", {"target": "whatif", "gpus": "1x80GiB"})
    text = html.content.decode()
    assert html.status_code == 200
    assert "data-kind>embedding model" in text
    assert 'id="kv-figure" hidden' in text


QWEN3_EMBEDDING = {  # Qwen/Qwen3-Embedding-0.6B's shape: a generative class, adapted by vLLM
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 151669,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


@pytest.mark.django_db
def test_hub_sentence_transformers_repo_is_planned_as_embedding(
    hub: HubStub, tmp_path: Path
) -> None:
    """Qwen3-Embedding's config says Qwen3ForCausalLM: only its modules.json, read from the
    Hub beside config.json, tells vLLM (and the planner) that it embeds."""
    folder = tmp_path / "qwen3-embed"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(QWEN3_EMBEDDING))
    (folder / "modules.json").write_text(json.dumps(MODULES))
    pooling = {"pooling_mode_lasttoken": True, "include_prompt": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8192}))
    hub.add_repo(folder_repo("acme/qwen3-embed", folder))
    spec = load_spec(resolve_source("acme/qwen3-embed"))
    assert spec.pooling is not None and not spec.encoder_only
    assert spec.derived_max_model_len == 8192  # sentence_bert_config.json, not 32768
    assert (spec.pooling.convert, spec.pooling.pooling_type) == ("embed", "LAST")
    (folder / "modules.json").unlink()
    hub.add_repo(folder_repo("acme/qwen3-plain", folder))
    assert load_spec(resolve_source("acme/qwen3-plain")).pooling is None

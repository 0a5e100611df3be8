"""Embedding and classification models planned as vLLM 0.33's pooling runner runs them: an
encoder (BERT, XLM-R) with no KV cache, a decoder embedder (Qwen3-Embedding) with its KV cache
but no LM head and no sampler. The configs are written to files and read back as the catalog
reads a model folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deployments import planning
from deployments.planning import Gpu, Host, Inventory, ModelSpec, PlanRequest
from deployments.planning.units import GIB

BERT_MINILM = {  # sentence-transformers/all-MiniLM-L12-v2's shape
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 384,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "torch_dtype": "float32",
}
XLMR_LARGE = {  # BAAI/bge-m3's shape
    "architectures": ["XLMRobertaModel"],
    "model_type": "xlm-roberta",
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "vocab_size": 250002,
    "max_position_embeddings": 8194,
    "type_vocab_size": 1,
    "torch_dtype": "float32",
}
QWEN3_EMBEDDING = {  # Qwen/Qwen3-Embedding-0.6B's shape
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
    "rope_theta": 1000000,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
ST_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {
        "idx": 2,
        "name": "2",
        "path": "2_Normalize",
        "type": "sentence_transformers.models.Normalize",
    },
]


def _pooling(mode: str) -> dict[str, Any]:
    modes = ("cls_token", "mean_tokens", "max_tokens", "lasttoken")
    return {"word_embedding_dimension": 1024, "include_prompt": True} | {
        f"pooling_mode_{m}": m == mode for m in modes
    }


def _folder(
    root: Path, config: dict[str, Any], *, pooling: str | None = None, name: str = "m"
) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if pooling is not None:
        (folder / "modules.json").write_text(json.dumps(ST_MODULES))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(_pooling(pooling)))
    return folder


def _spec(folder: Path) -> ModelSpec:
    """As the catalog reads a folder: config.json, then modules.json and 1_Pooling if present."""
    config = json.loads((folder / "config.json").read_text())
    modules = pooling = None
    if (folder / "modules.json").exists():
        modules = json.loads((folder / "modules.json").read_text())
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    return ModelSpec.from_config(config, name=folder.name, st_modules=modules, st_pooling=pooling)


def _one_gpu(total_gib: int = 80, free_gib: float | None = None) -> Inventory:
    total = total_gib * GIB
    free = total if free_gib is None else int(free_gib * GIB)
    return Inventory((Host("h", (Gpu(0, "NVIDIA H100 80GB HBM3", total, free),)),))


def _bert_parameters(c: dict[str, Any]) -> int:
    """BertModel's parameters without its pooler head (vLLM's BertEmbeddingModel)."""
    h, i, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    padded_vocab = -(-c["vocab_size"] // 64) * 64  # VocabParallelEmbedding pads to 64
    rows = padded_vocab + c["max_position_embeddings"] + c["type_vocab_size"]
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    return rows * h + 2 * h + layers * layer


def test_bert_is_an_encoder_with_no_kv_cache(tmp_path: Path) -> None:
    spec = _spec(_folder(tmp_path, BERT_MINILM))
    assert spec.pooling is not None and spec.pooling.label == "embedding model"
    assert spec.encoder_only and spec.pooling.convert == "none"
    p = planning.plan(spec, _one_gpu(), PlanRequest()).plans[0]
    assert p.fits, p.reasons
    assert p.kv_cache_tokens == 0
    assert all(m.kv_cache_bytes == 0 for m in p.per_gpu)
    # fp32 checkpoint served in fp16 (vLLM's "auto"), every weight counted, no LM head
    assert p.per_gpu[0].weights_bytes == 2 * _bert_parameters(BERT_MINILM)
    # whole prompts per step: H100's 8192 batched tokens hold 16 prompts of 512
    assert p.max_concurrency == 8192 // 512
    assert p.engine_settings.runner == "pooling" and p.engine_settings.convert is None


def test_encoder_share_is_sized_not_92_percent(tmp_path: Path) -> None:
    """vLLM refuses to start unless utilization × total is free, though an encoder uses only
    weights and one batch: the share holds that plus the margin, so it fits beside others."""
    spec = _spec(_folder(tmp_path, BERT_MINILM))
    p = planning.plan(spec, _one_gpu(80, free_gib=6), PlanRequest()).plans[0]
    assert p.fits, p.reasons
    gmu = p.engine_settings.gpu_memory_utilization
    assert 0 < gmu <= 0.05
    mem = p.per_gpu[0]
    assert mem.total_bytes <= mem.budget_bytes <= 6 * GIB
    generative = ModelSpec.from_config({**BERT_MINILM, "architectures": ["BertForMaskedLM"]})
    assert generative.pooling is not None  # a registry pooling model too (registry.py:223)


def test_encoder_refuses_a_batch_shorter_than_a_prompt(tmp_path: Path) -> None:
    spec = _spec(_folder(tmp_path, BERT_MINILM))
    req = PlanRequest(max_num_batched_tokens=256)
    p = planning.plan(spec, _one_gpu(), req).plans[0]
    assert not p.fits
    assert "without chunked prefill" in p.reasons[0]


def test_encoder_that_does_not_fit_says_why(tmp_path: Path) -> None:
    spec = _spec(_folder(tmp_path, XLMR_LARGE, pooling="cls_token"))
    p = planning.plan(spec, _one_gpu(1), PlanRequest(gpu_memory_utilization=0.5)).plans[0]
    assert not p.fits
    assert "weights and activations need" in p.reasons[0]


def test_xlm_roberta_with_sentence_transformers_pooling(tmp_path: Path) -> None:
    spec = _spec(_folder(tmp_path, XLMR_LARGE, pooling="cls_token"))
    assert spec.pooling is not None
    assert spec.pooling.encoder_only and spec.pooling.pooling_type == "CLS"
    assert spec.pooling.normalize and spec.pooling.convert == "none"
    p = planning.plan(spec, _one_gpu(), PlanRequest()).plans[0]
    assert p.fits and p.kv_cache_tokens == 0
    # no chunked prefill: the batch is at least one whole prompt (arg_utils.py:3195-3199)
    assert p.max_model_len == 8194 and p.max_concurrency == 1.0


def test_qwen3_embedding_keeps_its_kv_cache_without_lm_head_or_sampler(tmp_path: Path) -> None:
    untied = {**QWEN3_EMBEDDING, "tie_word_embeddings": False}
    embed = _spec(_folder(tmp_path, untied, pooling="lasttoken"))
    generate = _spec(_folder(tmp_path, untied, name="g"))
    assert embed.pooling is not None and generate.pooling is None
    assert not embed.encoder_only
    assert (embed.pooling.convert, embed.pooling.pooling_type) == ("embed", "LAST")
    assert embed.pooling.chunked_prefill  # last-token pooling chunks (model.py:2193-2230)
    pe = planning.plan(embed, _one_gpu(), PlanRequest()).plans[0]
    pg = planning.plan(generate, _one_gpu(), PlanRequest()).plans[0]
    assert pe.fits and pe.kv_cache_tokens > 0
    assert (pe.engine_settings.runner, pe.engine_settings.convert) == ("pooling", "embed")
    assert (pg.engine_settings.runner, pg.engine_settings.convert) == (None, None)
    table = -(-151669 // 64) * 64 * 1024 * 2
    assert pg.per_gpu[0].weights_bytes - pe.per_gpu[0].weights_bytes == table
    assert pe.per_gpu[0].activation_bytes < pg.per_gpu[0].activation_bytes  # no sampler
    assert pe.kv_cache_tokens > pg.kv_cache_tokens  # what the head and sampler left free


@pytest.mark.parametrize(
    ("architecture", "model_type", "task", "encoder"),
    [
        ("BertForSequenceClassification", "bert", "classify", True),
        ("XLMRobertaForSequenceClassification", "xlm-roberta", "classify", True),
        ("Qwen3ForSequenceClassification", "qwen3", "classify", False),
        ("GteNewModel", "new", "embed", True),
        ("LlamaForCausalLM", "llama", None, False),
    ],
)
def test_architecture_decides_as_vllm_does(
    architecture: str, model_type: str, task: str | None, encoder: bool
) -> None:
    config = {**BERT_MINILM, "architectures": [architecture], "model_type": model_type}
    spec = ModelSpec.from_config(config)
    assert (spec.pooling.task if spec.pooling else None) == task
    assert spec.encoder_only is encoder


def test_mean_pooled_decoder_takes_whole_prompts(tmp_path: Path) -> None:
    spec = _spec(_folder(tmp_path, QWEN3_EMBEDDING, pooling="mean_tokens"))
    assert spec.pooling is not None and not spec.pooling.chunked_prefill
    s = planning.resolve(spec, PlanRequest(), 80 * GIB, "NVIDIA H100 80GB HBM3")
    assert s.max_num_batched_tokens == 32768  # max(max_model_len, 8192)

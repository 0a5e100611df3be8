"""Weights per rank, against figures worked out by hand."""

import pytest

from deployments.planning import ModelSpec
from deployments.planning.memory.weights import Shard, pp_layer_ranges, rank_weights_bytes
from tests.support.planning import LLAMA_8B, LLAMA_70B

GB = 10**9


def weights(config: dict, *, tp: int = 1, pp: int = 1, rank: int = 0, quant=None) -> int:
    spec = ModelSpec.from_config(config)
    q = quant if quant is not None else spec.quant
    return rank_weights_bytes(spec, Shard(tp, pp, rank, 2, q))


def llama70_params() -> int:
    h, i, layers, v = 8192, 28672, 80, 128256
    attn = 2 * h * h + 2 * h * 1024
    return layers * (attn + 3 * h * i + 2 * h) + 2 * v * h + h


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}


@pytest.mark.parametrize(
    ("config", "low_gb", "high_gb"),
    [
        (LLAMA_70B, 139.0, 142.0),  # 70.6e9 params × 2 bytes ≈ 140 GB
        ({**LLAMA_70B, "quantization_config": AWQ}, 39.0, 40.5),  # 35.6 GB int4 + 4.2 GB fp16 vocab
        (LLAMA_8B, 15.9, 16.2),  # 8.03e9 × 2 (+32 MiB RoPE cache)
    ],
)
def test_textbook_totals(config, low_gb, high_gb):
    assert low_gb * GB <= weights(config) <= high_gb * GB


def test_int4_linear_layers_are_about_35_gb():
    vocab = 2 * 128256 * 8192 * 2
    linear = weights({**LLAMA_70B, "quantization_config": AWQ}) - vocab
    assert 35.0 * GB <= linear <= 36.0 * GB  # 68.5e9 × (4 bits + fp16 scale and zero per 128)


def test_fp16_70b_is_params_times_two_plus_rope_cache():
    rope = 8192 * 128 * 2
    assert weights(LLAMA_70B) == llama70_params() * 2 + rope


def test_tp_halves_the_shardable_parts():
    full, half = weights(LLAMA_70B), weights(LLAMA_70B, tp=2)
    replicated = (80 * 2 * 8192 + 8192) * 2 + 8192 * 128 * 2  # norms and RoPE cache
    assert half == (full - replicated) // 2 + replicated


def test_kv_heads_replicate_beyond_tp():
    spec = {**LLAMA_8B, "num_key_value_heads": 2}
    at_4 = weights(spec, tp=4)
    at_2 = weights(spec, tp=2)
    kv_at_2 = 32 * 2 * 4096 * 128 * 2  # one KV head per rank either way
    assert at_2 - at_4 > 0
    q_o_mlp_vocab_half = at_2 - kv_at_2 - (at_4 - kv_at_2)
    assert q_o_mlp_vocab_half > 0


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [(32, 2, [16, 16]), (32, 3, [11, 11, 10]), (80, 3, [27, 27, 26]), (27, 4, [7, 7, 7, 6])],
)
def test_pp_split_follows_vllm(layers, pp, expected):
    assert [len(r) for r in pp_layer_ranges(layers, pp)] == expected


def test_pp_stages_hold_embedding_first_and_head_last():
    vocab = 128256 * 4096 * 2
    first, last = weights(LLAMA_8B, pp=2, rank=0), weights(LLAMA_8B, pp=2, rank=1)
    assert first + last - weights(LLAMA_8B) == 8192 * 128 * 2  # only the RoPE cache twice
    assert abs(first - last) < vocab // 100


def test_tied_embedding_counted_once_without_pp():
    tied = {**LLAMA_8B, "tie_word_embeddings": True}
    assert weights(LLAMA_8B) - weights(tied) == 128256 * 4096 * 2


def test_vocab_padded_to_64():
    odd = {**LLAMA_8B, "vocab_size": 128257}
    assert ModelSpec.from_config(odd).padded_vocab_size == 128320


def test_fp8_runtime_halves_linear_layers():
    from deployments.planning.model.quant import runtime

    fp8 = weights(LLAMA_8B, quant=runtime("fp8"))
    linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert weights(LLAMA_8B) - fp8 == pytest.approx(linear, rel=1e-3)


def test_moe_counts_every_expert():
    cfg = {
        **LLAMA_8B,
        "model_type": "qwen2_moe",
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 2048,
        "num_hidden_layers": 2,
    }
    expert, router = 3 * 4096 * 1024, 4096
    extra = weights(cfg) - weights({**cfg, "num_experts": 4})
    assert extra == 2 * 4 * (expert + router) * 2  # 2 layers × 4 more experts, bf16
    assert ModelSpec.from_config(cfg).moe is not None


def test_moe_experts_shard_over_tp():
    cfg = {**LLAMA_8B, "model_type": "mixtral", "num_local_experts": 8, "num_hidden_layers": 2}
    experts = 2 * 8 * 3 * 4096 * 14336 * 2
    assert experts // 2 < weights(cfg) - weights(cfg, tp=2) < experts // 2 + 2 * 128256 * 4096 * 2

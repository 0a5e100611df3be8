"""Per-layer attention geometry in the weights: Gemma 4's full-attention layers carry their
own head width and KV heads (vLLM 0.33 models/gemma4.py, transformers' per_layer_config)."""

from dataclasses import replace

import pytest

from deployments.planning import ModelSpec
from deployments.planning.memory.weights import Shard, attention_geometry, rank_weights_bytes
from deployments.planning.model.layers import Kind, LayerCache
from tests.support.planning import fixture_config

GEMMA4_NVFP4 = "nvidia--Gemma-4-31B-IT-NVFP4_config"


def spec_of(name: str) -> ModelSpec:
    return ModelSpec.from_config(fixture_config(name))


@pytest.mark.parametrize(
    ("name", "layer", "expected"),
    [
        (GEMMA4_NVFP4, 0, (16, 256)),  # sliding layer: the config's own heads
        (GEMMA4_NVFP4, 5, (4, 512)),  # full attention: global_head_dim, global KV heads
        ("google--gemma-4-26B-A4B", 5, (2, 512)),
        ("google--gemma-4-26B-A4B", 4, (8, 256)),
        ("Qwen--Qwen3.5-27B", 3, (4, 256)),  # full attention with the model's own width
    ],
)
def test_layer_geometry(name, layer, expected):
    assert attention_geometry(spec_of(name), layer) == expected


def test_global_layers_of_gemma4_31b_add_their_qkv_and_o():
    """Ten global layers: QKV (32 + 2·4) × 512 and O 16384 × 5376 in bf16 (attention is in the
    NVFP4 checkpoint's exclude list) instead of the sliding layers' (32 + 2·16) × 256 and 8192."""
    spec = spec_of(GEMMA4_NVFP4)
    shard = Shard(1, 1, 0, 2, spec.quant)
    h = 5376
    own = h * (32 + 2 * 4) * 512 + 32 * 512 * h
    flat = h * (32 + 2 * 16) * 256 + 32 * 256 * h
    norms = (2 * 512 - 2 * 256) if spec.qk_norm else 0
    delta = rank_weights_bytes(spec, shard) - rank_weights_bytes(_uniform_heads(spec), shard)
    assert delta == 10 * 2 * (own - flat + norms)
    assert rank_weights_bytes(spec, shard) / 2**30 == pytest.approx(30.72, abs=0.01)


def _uniform_heads(spec: ModelSpec) -> ModelSpec:
    """The spec as the planner read it before: every layer with the config's own heads."""
    plan = spec.layer_plan
    assert plan is not None
    flat = LayerCache(Kind.FULL, spec.num_kv_heads, spec.head_dim)
    caches = tuple(
        tuple(flat if c.kind is Kind.FULL else c for c in layer) for layer in plan.caches
    )
    return replace(spec, layer_plan=replace(plan, caches=caches))


@pytest.mark.parametrize(("k_eq_v", "heads"), [(True, 4), (False, 16)])
def test_global_kv_heads_follow_attention_k_eq_v(k_eq_v, heads):
    raw = fixture_config(GEMMA4_NVFP4)
    raw["text_config"] = {**raw["text_config"], "attention_k_eq_v": k_eq_v}
    assert attention_geometry(ModelSpec.from_config(raw), 5) == (heads, 512)

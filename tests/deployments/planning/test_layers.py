"""Per-layer cache kinds and linear/Mamba state sizes read from the config.json of real models."""

import pytest

from deployments.planning import ModelSpec, PlanRequest, parse_gpus
from deployments.planning import plan as make_plan
from deployments.planning.memory.weights import Shard, rank_weights_bytes
from deployments.planning.model.families import model_family
from deployments.planning.model.layers import Kind
from tests.support.planning import LLAMA_8B, fixture_config

QWEN3_NEXT = "Qwen--Qwen3-Next-80B-A3B-Thinking"
QWEN35_27B = "Qwen--Qwen3.5-27B"
QWEN35_MOE = "Qwen--Qwen3.5-35B-A3B"
NEMOTRON_NANO = "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
NEMOTRON_H = "nvidia--Nemotron-H-56B-Base-8K"
GPT_OSS_20B = "openai--gpt-oss-20b"
GPT_OSS_120B = "openai--gpt-oss-120b"
GEMMA4 = "google--gemma-4-26B-A4B"
SCOUT = "meta-llama--Llama-4-Scout-17B-16E-Instruct"
DEEPSEEK_V3 = "deepseek-ai--DeepSeek-V3"
DEEPSEEK_V32 = "deepseek-ai--DeepSeek-V3.2"
KIMI_K2 = "moonshotai--Kimi-K2-Instruct"


def spec_of(name: str) -> ModelSpec:
    return ModelSpec.from_config(fixture_config(name))


# (model, {kind: layers}, family)
KINDS = [
    (QWEN3_NEXT, {Kind.FULL: 12, Kind.LINEAR: 36}, "hybrid"),
    (QWEN35_27B, {Kind.FULL: 16, Kind.LINEAR: 48}, "hybrid"),
    (QWEN35_MOE, {Kind.FULL: 10, Kind.LINEAR: 30}, "hybrid"),
    (NEMOTRON_NANO, {Kind.FULL: 6, Kind.MAMBA: 23}, "hybrid"),
    (NEMOTRON_H, {Kind.FULL: 10, Kind.MAMBA: 54}, "hybrid"),
    (GPT_OSS_20B, {Kind.FULL: 12, Kind.SLIDING: 12}, "MXFP4/NVFP4"),
    (GPT_OSS_120B, {Kind.FULL: 18, Kind.SLIDING: 18}, "MXFP4/NVFP4"),
    (GEMMA4, {Kind.FULL: 5, Kind.SLIDING: 25}, "VLM"),
    (SCOUT, {Kind.FULL: 12, Kind.CHUNKED: 36}, "VLM"),  # vision tower outranks chunks
    (DEEPSEEK_V3, {Kind.MLA: 61}, "MLA"),
    (DEEPSEEK_V32, {Kind.MLA: 61}, "MLA"),
    (KIMI_K2, {Kind.MLA: 61}, "MLA"),
]


@pytest.mark.parametrize(("name", "counts", "family"), KINDS)
def test_layer_kinds_of_real_configs(name, counts, family):
    spec = spec_of(name)
    plan = spec.layer_plan
    assert plan is not None
    assert {k: plan.count(k) for k in plan.kinds()} == counts
    assert plan.warnings == ()
    assert model_family(spec) == family


def test_where_the_attention_layers_sit():
    next_kinds = [c[0].kind for c in spec_of(QWEN3_NEXT).layer_plan.caches]
    assert [i for i, k in enumerate(next_kinds) if k is Kind.FULL] == list(range(3, 48, 4))
    nano = spec_of(NEMOTRON_NANO).layer_plan
    # "MEMEM*E...": MoE (E) and MLP (-) layers keep no cache at all
    assert [len(c) for c in nano.caches[:7]] == [1, 0, 1, 0, 1, 1, 0]
    assert nano.caches[5][0].kind is Kind.FULL
    oss = spec_of(GPT_OSS_20B).layer_plan.caches
    assert (oss[0][0].kind, oss[0][0].window, oss[1][0].kind) == (Kind.SLIDING, 128, Kind.FULL)
    scout = spec_of(SCOUT).layer_plan.caches
    # Llama 4: every 4th layer is NoPE and attends globally, the others in 8192-token chunks
    assert [c[0].kind for c in scout[:4]] == [Kind.CHUNKED] * 3 + [Kind.FULL]
    assert scout[0][0].window == 8192


def test_gemma4_global_layers_have_their_own_heads():
    caches = spec_of(GEMMA4).layer_plan.caches
    local, full = caches[0][0], caches[5][0]
    assert (local.kind, local.kv_heads, local.head_dim, local.window) == (
        Kind.SLIDING,
        8,
        256,
        1024,
    )
    assert (full.kind, full.kv_heads, full.head_dim) == (Kind.FULL, 2, 512)


def test_deepseek_v32_indexer_keys_ride_with_the_latent():
    v3 = spec_of(DEEPSEEK_V3).layer_plan.caches[0][0]
    v32 = spec_of(DEEPSEEK_V32).layer_plan.caches[0][0]
    assert (v3.head_dim, v3.indexer_bytes) == (576, 0)
    assert (v32.head_dim, v32.indexer_bytes) == (576, 128 + 4)


def gdn_state(nk, nv, hk, hv, kernel, tp, conv_bytes, ssm_bytes):
    conv = (hk * nk * 2 + hv * nv) // tp * (kernel - 1) * conv_bytes
    return conv + nv // tp * hv * hk * ssm_bytes


def mamba2_state(heads, head_dim, state, groups, kernel, tp, conv_bytes, ssm_bytes):
    groups = groups if groups % tp == 0 else tp
    conv = (heads * head_dim + 2 * groups * state) // tp * (kernel - 1) * conv_bytes
    return conv + heads // tp * head_dim * state * ssm_bytes


# (model, tp, state bytes per sequence on one rank, bf16 model)
STATES = [
    (QWEN3_NEXT, 1, gdn_state(16, 32, 128, 128, 4, 1, 2, 2)),  # ssm state in the model dtype
    (QWEN3_NEXT, 4, gdn_state(16, 32, 128, 128, 4, 4, 2, 2)),
    (QWEN35_27B, 1, gdn_state(16, 48, 128, 128, 4, 1, 2, 4)),  # mamba_ssm_dtype float32
    (QWEN35_MOE, 2, gdn_state(16, 32, 128, 128, 4, 2, 2, 4)),
    (NEMOTRON_NANO, 1, mamba2_state(64, 64, 128, 8, 4, 1, 2, 4)),
    (NEMOTRON_NANO, 16, mamba2_state(64, 64, 128, 8, 4, 16, 2, 4)),  # groups replicated
    (NEMOTRON_H, 8, mamba2_state(256, 64, 256, 8, 4, 8, 2, 4)),  # float32 by vLLM's default
]


@pytest.mark.parametrize(("name", "tp", "expected"), STATES)
def test_state_per_sequence(name, tp, expected):
    state = spec_of(name).layer_plan.state
    assert state.bytes_per_sequence(tp, 2) == expected


def test_qwen3_next_state_is_about_a_mebibyte():
    assert spec_of(QWEN3_NEXT).layer_plan.state.bytes_per_sequence(1, 2) == 1_097_728


def test_dense_model_is_all_full_attention():
    spec = ModelSpec.from_config(LLAMA_8B)
    assert spec.layer_plan.kinds() == {Kind.FULL}
    assert model_family(spec) == "dense"


def test_unknown_layer_kind_is_a_warning_and_full_attention():
    config = {**LLAMA_8B, "layer_types": ["full_attention"] * 31 + ["quantum_attention"]}
    plan = ModelSpec.from_config(config).layer_plan
    assert plan.count(Kind.FULL) == 32
    assert len(plan.warnings) == 1
    assert "'quantum_attention'" in plan.warnings[0]
    assert "estimated as full attention" in plan.warnings[0]


def test_linear_layers_without_state_dimensions_are_a_warning():
    config = {**LLAMA_8B, "layer_types": ["linear_attention", "full_attention"] * 16}
    plan = ModelSpec.from_config(config).layer_plan
    assert plan.state is None
    assert "no state dimensions" in plan.warnings[0]


def test_window_turned_off_is_full_attention():
    config = {**LLAMA_8B, "sliding_window": 4096, "use_sliding_window": False}
    config["layer_types"] = ["sliding_attention"] * 32
    assert ModelSpec.from_config(config).layer_plan.kinds() == {Kind.FULL}


# (model, parameters the published model card gives, in billions)
PARAMETERS = [
    (NEMOTRON_NANO, 31.6),  # Mamba / attention / MoE layers each alone, relu² experts
    (NEMOTRON_H, 56.0),
    (QWEN3_NEXT, 80.0),  # Gated DeltaNet in 36 of 48 layers; MTP layer not loaded
]


@pytest.mark.parametrize(("name", "billions"), PARAMETERS)
def test_hybrid_weights_match_the_model_card(name, billions):
    spec = spec_of(name)
    weights = rank_weights_bytes(spec, Shard(1, 1, 0, 2, None))
    assert abs(weights / 2 / 1e9 - billions) / billions < 0.015


def test_tp_splits_the_mamba_mixer():
    spec = spec_of(NEMOTRON_H)
    one = rank_weights_bytes(spec, Shard(1, 1, 0, 2, None))
    eight = rank_weights_bytes(spec, Shard(8, 1, 0, 2, None))
    assert one / 8 < eight < one / 7.5


# Field names as the Hub configs of these families spell them; dimensions trimmed.
GRANITE_H = {
    **LLAMA_8B,
    "model_type": "granitemoehybrid",
    "num_hidden_layers": 4,
    "layer_types": ["mamba", "mamba", "mamba", "attention"],
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
}
FALCON_H1 = {
    **LLAMA_8B,
    "model_type": "falcon_h1",
    "num_hidden_layers": 3,
    "mamba_n_heads": 64,
    "mamba_d_head": 64,
    "mamba_d_ssm": 4096,
    "mamba_d_state": 256,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
}
JAMBA = {
    **LLAMA_8B,
    "model_type": "jamba",
    "num_hidden_layers": 8,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
}


@pytest.mark.parametrize(
    ("config", "kinds", "state"),
    [
        # Mamba-2, inner = expand × hidden = 8192; groups replicated at TP 2
        (
            GRANITE_H,
            [(Kind.MAMBA,)] * 3 + [(Kind.FULL,)],
            mamba2_state(128, 64, 128, 1, 4, 2, 2, 2),
        ),
        # attention and Mamba-2 side by side in every layer; inner = mamba_d_ssm
        (FALCON_H1, [(Kind.FULL, Kind.MAMBA)] * 3, mamba2_state(64, 64, 256, 1, 4, 2, 2, 2)),
        # Mamba-1: conv (8192/2 × 3) and SSM (8192/2 × 16) states, one attention layer in 8
        (
            JAMBA,
            [(Kind.MAMBA,)] * 4 + [(Kind.FULL,)] + [(Kind.MAMBA,)] * 3,
            4096 * 3 * 2 + 4096 * 16 * 2,
        ),
    ],
)
def test_other_hybrid_families(config, kinds, state):
    spec = ModelSpec.from_config(config)
    plan = spec.layer_plan
    assert [tuple(c.kind for c in layer) for layer in plan.caches] == kinds
    assert plan.state.bytes_per_sequence(2, 2) == state
    assert plan.warnings == ()
    planned = make_plan(spec, parse_gpus("2x80GiB"), PlanRequest(max_model_len=8192)).plans[0]
    assert planned.fits and planned.kv_cache_tokens > 0

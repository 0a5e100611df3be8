"""Loose ends of issue 23 on real configs (fixtures/configs): the FP4 family decided by the
resolved weight format, the checkpoint's KV dtype reaching the KV rules, Llama 4's vision tower
(vLLM 0.33 models/mllama4.py) and Gemma 4's top_k_experts."""

from dataclasses import replace

import pytest

from deployments.planning import (
    ModelSpec,
    PlanRequest,
    estimate_layout,
    resolve,
    with_hf_quant_config,
)
from deployments.planning.model.families import model_family
from deployments.planning.model.formatnotes import format_notes
from tests.support.planning import fixture_config as raw

GIB = 1 << 30
H100 = int(79.19 * GIB)
NVFP4_235B = "nvidia--Qwen3-235B-A22B-NVFP4"


def nvfp4_235b(algo: str = "NVFP4") -> ModelSpec:
    quant = raw(f"{NVFP4_235B}_hf_quant_config")
    quant["quantization"]["quant_algo"] = algo
    return ModelSpec.from_config(with_hf_quant_config(raw(f"{NVFP4_235B}_config"), quant))


# compressed-tensors NVFP4 as llm-compressor writes it (RedHatAI's *-NVFP4 checkpoints)
CT_NVFP4 = {
    "quant_method": "compressed-tensors",
    "format": "nvfp4-pack-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 4,
                "type": "float",
                "strategy": "tensor_group",
                "group_size": 16,
                "symmetric": True,
                "dynamic": False,
            },
        }
    },
    "ignore": ["lm_head"],
}


@pytest.mark.parametrize(
    ("make", "family", "note"),
    [
        (lambda: nvfp4_235b("NVFP4"), "MXFP4/NVFP4", "NVFP4 weights"),
        (lambda: nvfp4_235b("FP8"), "MoE", "8-bit weights"),  # ModelOpt FP8 is not FP4
        (lambda: nvfp4_235b("FP8_PB_WO"), "MoE", "8-bit weights"),
        (
            lambda: ModelSpec.from_config(
                {**raw(f"{NVFP4_235B}_config"), "quantization_config": CT_NVFP4}
            ),
            "MXFP4/NVFP4",
            "NVFP4 weights",
        ),
        (lambda: ModelSpec.from_config(raw("openai--gpt-oss-20b_config")), "MXFP4/NVFP4", "FP4"),
        (
            lambda: ModelSpec.from_config(raw("nvidia--Gemma-4-31B-IT-NVFP4_config")),
            "MXFP4/NVFP4",
            "NVFP4 weights",
        ),
    ],
)
def test_fp4_family_follows_the_resolved_format(make, family, note):
    spec = make()
    assert model_family(spec) == family
    assert format_notes(spec)[0].startswith(note)


def test_modelopt_fp8_kv_reaches_the_kv_rules():
    spec = nvfp4_235b()
    auto = resolve(spec, PlanRequest(tensor_parallel_size=4), H100, "H100")
    assert (auto.kv_rules.kv_cache_dtype, auto.kv_element_bytes) == ("fp8", 1)
    asked = resolve(
        spec, PlanRequest(tensor_parallel_size=4, kv_cache_dtype="bfloat16"), H100, "H100"
    )
    assert (asked.kv_rules.kv_cache_dtype, asked.kv_element_bytes) == ("bfloat16", 2)


@pytest.mark.parametrize(
    ("kv_dtype", "checkpoint_fp8", "ds_mla"),
    [("auto", False, False), ("auto", True, True), ("fp8", False, True), ("bfloat16", True, False)],
)
def test_sparse_mla_serves_fp8_as_fp8_ds_mla(kv_dtype, checkpoint_fp8, ds_mla):
    # mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype: FlashMLA sparse (V3.2)
    spec = ModelSpec.from_config(raw("deepseek-ai--DeepSeek-V3.2"))
    if checkpoint_fp8:
        spec = replace(spec, quant=replace(spec.quant, kv_cache_dtype="fp8"))
    s = resolve(spec, PlanRequest(tensor_parallel_size=8, kv_cache_dtype=kv_dtype), H100, "H100")
    assert s.kv_rules.ds_mla is ds_mla
    dense_mla = ModelSpec.from_config(raw("deepseek-ai--DeepSeek-V3"))
    v3 = resolve(
        dense_mla, PlanRequest(tensor_parallel_size=8, kv_cache_dtype=kv_dtype), H100, "H100"
    )
    assert v3.kv_rules.ds_mla is False  # no indexer: plain fp8 MLA


def test_llama4_scout_vision_tower_as_mllama4_builds_it():
    spec = ModelSpec.from_config(raw("meta-llama--Llama-4-Scout-17B-16E-Instruct"))
    h, inter, layers = 1408, 5632, 34
    embed = 3 * 14 * 14 * h + h + (24 * 24 + 1) * h + 4 * h
    block = 4 * h * h + 4 * h + 2 * h * inter + inter + h + 4 * h
    adapter = inter * 4096 + 4096 * 4096  # Llama4VisionPixelShuffleMLP, no bias
    projector = 4096 * 5120  # Llama4MultiModalProjector to the text width
    assert spec.vision_parameters == embed + layers * block + adapter + projector == 871_932_416
    assert model_family(spec) == "VLM"


@pytest.mark.parametrize(
    ("name", "experts", "per_token"),
    [
        ("google--gemma-4-26B-A4B", 128, 8),  # top_k_experts
        ("google--gemma-4-26B-A4B_config", 128, 8),
        ("openai--gpt-oss-20b_config", 32, 4),  # num_experts_per_tok
        ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 16, 1),
    ],
)
def test_experts_per_token(name, experts, per_token):
    moe = ModelSpec.from_config(raw(name)).moe
    assert (moe.num_experts, moe.experts_per_token) == (experts, per_token)


def test_llama4_moe_layers_carry_a_shared_expert():
    # llama4.py Llama4MoE: LlamaMLP shared_expert of intermediate_size beside the 16 routed ones
    cfg = raw("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    spec = ModelSpec.from_config(cfg)
    assert spec.moe.shared_intermediate_size == 8192
    assert sum(spec.is_moe(i) for i in range(48)) == 48
    without = replace(spec, moe=replace(spec.moe, shared_intermediate_size=0))
    tp4 = {"tp": 4, "pp": 1, "gpu_total_bytes": H100, "gpu_name": "H100"}
    request = PlanRequest(tensor_parallel_size=4, max_model_len=8192)
    added = (
        estimate_layout(spec, request, **tp4).per_gpu[0].weights_bytes
        - estimate_layout(without, request, **tp4).per_gpu[0].weights_bytes
    )
    assert added == 48 * 3 * 5120 * 8192 * 2 // 4  # gate, up, down in bf16, split by TP 4
    # Maverick-style interleaving: every other layer is MoE
    every_other = {**cfg, "text_config": {**cfg["text_config"], "interleave_moe_layer_step": 2}}
    maverick = ModelSpec.from_config(every_other)
    assert [maverick.is_moe(i) for i in range(4)] == [False, True, False, True]
    # ... and its dense layers are an MLP of intermediate_size_mlp (Scout has none: 8192 stays)
    assert (spec.intermediate_size, maverick.intermediate_size) == (8192, 16384)
    half = {**every_other["text_config"], "intermediate_size_mlp": 8192}
    narrow = ModelSpec.from_config({**every_other, "text_config": half})
    dense_added = (
        estimate_layout(maverick, request, **tp4).per_gpu[0].weights_bytes
        - estimate_layout(narrow, request, **tp4).per_gpu[0].weights_bytes
    )
    assert dense_added == 24 * 3 * 5120 * (16384 - 8192) * 2 // 4

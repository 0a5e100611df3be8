"""Quantized formats of the models people serve now (issue 23): MXFP4 (gpt-oss), ModelOpt
NVFP4, unknown methods; configs of real checkpoints in fixtures/configs (copied from
../shared/planner-cases/configs). Figures worked out from vLLM 0.33's source by hand."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from deployments.planning import (
    ModelSpec,
    PlanRequest,
    estimate_layout,
    format_notes,
    with_hf_quant_config,
)
from deployments.planning.memory.weights import Shard, rank_weights_bytes

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
GIB = 1 << 30
H100 = int(79.19 * GIB)
B200 = int(178.36 * GIB)


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}_config.json").read_text())


def spec_of(name: str) -> ModelSpec:
    folder_quant = CONFIGS / f"{name}_hf_quant_config.json"
    cfg = config(name)
    if folder_quant.exists():
        cfg = with_hf_quant_config(cfg, json.loads(folder_quant.read_text()))
    return ModelSpec.from_config(cfg)


def layout(name: str, *, tp=1, version="0.33.0", gpu=H100, gpu_name="H100", **req):
    request = PlanRequest(
        tensor_parallel_size=tp, pipeline_parallel_size=1, vllm_version=version, **req
    )
    return estimate_layout(
        spec_of(name), request, tp=tp, pp=1, gpu_total_bytes=gpu, gpu_name=gpu_name
    )


def weights_gib(name: str, **kw) -> float:
    return layout(name, **kw).per_gpu[0].weights_bytes / GIB


def gpt_oss_20b_experts(hidden: int, inter: int) -> int:
    """24 layers × 32 experts of fp4 pairs plus an e8m0 scale per 32, fp32 biases."""
    w13 = 2 * inter * hidden // 2 + 2 * inter * hidden // 32
    w2 = hidden * inter // 2 + hidden * inter // 32
    return 24 * 32 * (w13 + w2 + (2 * inter + hidden) * 4)


# checkpoint: 13,761,264,768 bytes of safetensors (12.82 GiB). vLLM logged "Model loading took
# 13.7 GiB" for gpt-oss-20b and ~66 GiB for gpt-oss-120b on one H100 before 0.33: Marlin's
# padding of hidden to 256 and intermediate to 128 (2880 -> 3072 × 2944).
@pytest.mark.parametrize(
    ("name", "tp", "version", "gpu", "low", "high"),
    [
        ("openai--gpt-oss-20b", 1, "0.19.0", H100, 13.6, 13.8),
        ("openai--gpt-oss-20b", 2, "0.19.0", H100, 7.0, 7.2),  # 1440 -> 1536 per rank
        ("openai--gpt-oss-20b", 1, "0.33.0", H100, 12.8, 12.9),  # Triton: 2880 is 45 × 64
        ("openai--gpt-oss-20b", 1, "0.33.0", B200, 13.6, 13.8),  # TRT-LLM pads like Marlin
        ("openai--gpt-oss-120b", 1, "0.19.0", H100, 65.8, 66.2),
        ("openai--gpt-oss-120b", 1, "0.33.0", H100, 60.7, 61.0),
    ],
)
def test_mxfp4_weights_follow_the_kernels_padding(name, tp, version, gpu, low, high):
    assert low <= weights_gib(name, tp=tp, version=version, gpu=gpu) <= high


def test_mxfp4_on_ampere_is_marlin_at_every_version():
    a100 = weights_gib("openai--gpt-oss-20b", gpu=H100, gpu_name="NVIDIA A100-SXM4-80GB")
    assert 13.6 <= a100 <= 13.8


def test_mxfp4_padding_is_the_difference_between_kernels():
    padded = layout("openai--gpt-oss-20b", version="0.19.0").per_gpu[0].weights_bytes
    triton = layout("openai--gpt-oss-20b").per_gpu[0].weights_bytes
    assert padded - triton == gpt_oss_20b_experts(3072, 2944) - gpt_oss_20b_experts(2880, 2880)


def test_mxfp4_at_tp4_is_padded_not_refused():
    result = layout("openai--gpt-oss-120b", tp=4, max_model_len=8192)
    assert result.fits, result.reasons
    assert 15.5 <= result.per_gpu[0].weights_bytes / GIB <= 16.5


@pytest.mark.parametrize(("gmu", "fits"), [(0.9, False), (0.95, True)])
def test_gpt_oss_120b_on_one_h100_needs_room_for_one_full_request(gmu, fits):
    # 66 GiB of padded weights leave too little of 0.9 × 79.19 GiB for 131,072 tokens of KV
    result = layout(
        "openai--gpt-oss-120b",
        version="0.19.0",
        max_model_len=131072,
        gpu_memory_utilization=gmu,
    )
    assert result.fits is fits
    if not fits:
        assert "To serve at least one request" in result.reasons[0]


def test_nvfp4_checkpoint_with_hf_quant_config_is_sized():
    spec = spec_of("nvidia--Qwen3-235B-A22B-NVFP4")
    assert spec.quant is not None and spec.quant.method == "modelopt_fp4"
    assert spec.quant.kv_cache_dtype == "fp8" and spec.quant.attention_quantized
    # 227e9 expert weights × (4 bits + an fp8 scale per 16) ≈ 128 GB, plus 16-bit vocab
    assert 122 <= weights_gib("nvidia--Qwen3-235B-A22B-NVFP4") <= 127
    assert 61 <= weights_gib("nvidia--Qwen3-235B-A22B-NVFP4", tp=2, max_model_len=8192) <= 64


def test_nvfp4_kv_cache_is_fp8_unless_asked_otherwise():
    fp8 = layout("nvidia--Qwen3-235B-A22B-NVFP4", tp=4, max_model_len=8192)
    bf16 = layout("nvidia--Qwen3-235B-A22B-NVFP4", tp=4, max_model_len=8192, kv_cache_dtype="auto")
    asked = layout(
        "nvidia--Qwen3-235B-A22B-NVFP4", tp=4, max_model_len=8192, kv_cache_dtype="bfloat16"
    )
    assert fp8.kv_cache_tokens == bf16.kv_cache_tokens
    assert 1.9 <= fp8.kv_cache_tokens / asked.kv_cache_tokens <= 2.1


def test_modelopt_in_config_json_keeps_excluded_attention_in_16_bits():
    spec = spec_of("nvidia--Gemma-4-31B-IT-NVFP4")
    assert spec.quant is not None and not spec.quant.attention_quantized
    assert format_notes(spec)[0].startswith("NVFP4 weights, bf16 attention")


@pytest.mark.parametrize(
    ("qc", "bits"),
    [
        ({"quant_method": "hqq", "nbits": 2}, 2),
        ({"quant_method": "quark_int8"}, 8),
        ({"quant_method": "something-new", "bits": 3, "group_size": 64}, 3),
    ],
)
def test_unknown_quantization_is_a_warning_with_an_estimate(qc, bits):
    spec = ModelSpec.from_config(
        {**config("Qwen--Qwen3-VL-8B-Instruct"), "quantization_config": qc}
    )
    assert spec.quant is not None and spec.quant.weight_bits == bits
    result = estimate_layout(
        spec, PlanRequest(max_model_len=8192), tp=1, pp=1, gpu_total_bytes=H100
    )
    assert any("unknown quantization method" in w for w in result.warnings)
    assert result.per_gpu[0].weights_bytes < 0.7 * 17.5e9  # not planned as 16-bit


def test_unknown_modelopt_algo_is_a_warning():
    spec = ModelSpec.from_config(
        {
            **config("Qwen--Qwen3-VL-8B-Instruct"),
            "quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"},
        }
    )
    assert spec.quant is not None and "W4A8_AWQ" in spec.quant.warning


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        # Transformers' Qwen3VLVisionModel on the meta device: 576,388,336 and 538,631,408
        ("Qwen--Qwen3-VL-8B-Instruct", 576.38e6, 576.40e6),
        ("Qwen--Qwen3-VL-30B-A3B-Instruct", 538.62e6, 538.64e6),
    ],
)
def test_qwen3_vl_vision_tower(name, low, high):
    assert low <= spec_of(name).vision_parameters <= high


@pytest.mark.parametrize(
    ("name", "text_hidden"),
    [("google--gemma-4-26B-A4B", 2816), ("nvidia--Gemma-4-31B-IT-NVFP4", 5376)],
)
def test_gemma4_vision_tower_is_counted_and_replicated(name, text_hidden):
    # Transformers' Gemma4VisionModel on the meta device counts 569,548,080 parameters; vLLM
    # adds embed_vision's projection to the text width and keeps the tower whole on every rank
    spec = spec_of(name)
    assert spec.vision_parameters == 569_548_080 + 1152 * text_hidden
    assert spec.vision_embeds == (280, text_hidden)  # vision_soft_tokens_per_image
    one, two = (rank_weights_bytes(spec, Shard(tp, 1, 0, 2, None)) for tp in (1, 2))
    text_only = rank_weights_bytes(replace(spec, vision_parameters=0), Shard(1, 1, 0, 2, None))
    text_two = rank_weights_bytes(replace(spec, vision_parameters=0), Shard(2, 1, 0, 2, None))
    assert one - text_only == two - text_two == spec.vision_parameters * 2


def test_qwen3_vl_8b_weights_are_the_checkpoints():
    # 8.77e9 parameters × 2 bytes: 16.3 GiB; the tower is tensor-parallel like the decoder
    assert 16.2 <= weights_gib("Qwen--Qwen3-VL-8B-Instruct", max_model_len=8192) <= 16.5
    assert 8.1 <= weights_gib("Qwen--Qwen3-VL-8B-Instruct", tp=2, max_model_len=8192) <= 8.3


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("openai--gpt-oss-20b", "FP4 experts, bf16 attention"),
        ("nvidia--Qwen3-235B-A22B-NVFP4", "fp8 KV cache"),
        ("Qwen--Qwen3-VL-8B-Instruct", "vision encoder: 576 M parameters"),
    ],
)
def test_format_notes(name, note):
    assert any(note in line for line in format_notes(spec_of(name)))


def test_config_json_quantization_wins_over_hf_quant_config():
    cfg = {"quantization_config": {"quant_method": "fp8"}}
    merged = with_hf_quant_config(cfg, {"producer": {"name": "modelopt"}})
    assert merged["quantization_config"] == {"quant_method": "fp8"}


def test_qwen3_vl_profile_holds_the_largest_images_embeddings():
    # one 16,384-token image (the encoder budget is max(8192 batched tokens, 16384)), each
    # embedding 4096 wide at four levels (the merger plus three deepstack mergers), in bf16
    vl = config("Qwen--Qwen3-VL-8B-Instruct")
    text_only = {k: v for k, v in vl.items() if k != "vision_config"}
    with_vision = estimate_layout(
        ModelSpec.from_config(vl), PlanRequest(max_model_len=8192), tp=1, pp=1, gpu_total_bytes=H100
    )
    without = estimate_layout(
        ModelSpec.from_config(text_only),
        PlanRequest(max_model_len=8192),
        tp=1,
        pp=1,
        gpu_total_bytes=H100,
    )
    extra = with_vision.per_gpu[0].activation_bytes - without.per_gpu[0].activation_bytes
    assert extra == 16384 * 4096 * 4 * 2


MLLAMA = {
    "architectures": ["MllamaForConditionalGeneration"],
    "model_type": "mllama",
    "text_config": {
        "model_type": "mllama_text_model",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 40,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "vision_config": {
        "hidden_size": 1280,
        "intermediate_size": 5120,
        "num_hidden_layers": 32,
        "num_global_layers": 8,
        "image_size": 560,
        "patch_size": 14,
    },
}


@pytest.mark.parametrize(("version", "refused"), [("0.10.2", False), ("0.33.0", True)])
def test_llama_32_vision_is_gone_after_vllm_0_10_2(version, refused):
    spec = ModelSpec.from_config(MLLAMA)
    request = PlanRequest(max_model_len=8192, vllm_version=version)
    result = estimate_layout(spec, request, tp=1, pp=1, gpu_total_bytes=H100)
    removed = "MllamaForConditionalGeneration was supported in vLLM until v0.10.2"
    assert any(removed in r for r in result.reasons) is refused
    assert 40 * (4 * 1280**2 + 2 * 1280 * 5120) < spec.vision_parameters  # 32 + 8 global

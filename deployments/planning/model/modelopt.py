"""NVIDIA ModelOpt checkpoints (``quant_method`` modelopt, or a separate hf_quant_config.json):
NVFP4, FP8 and MXFP8 as vLLM's modelopt.py stores them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .quantspec import QuantSpec

NVFP4_GROUP = 16  # one fp8 (e4m3) block scale per 16 fp4 weights
MXFP8_GROUP = 32  # one e8m0 scale per 32 fp8 weights
ATTENTION_MARKERS = ("self_attn", "q_proj", "qkv_proj", ".attn")


def is_modelopt(qc: Mapping[str, Any]) -> bool:
    """A dict written by ModelOpt: its ``producer`` is modelopt (hf_quant_config.json)."""
    producer = qc.get("producer")
    return isinstance(producer, Mapping) and producer.get("name") == "modelopt"


def from_config(qc: Mapping[str, Any]) -> QuantSpec:
    """The nested (``{"quantization": {...}}``) or flat ModelOpt layout, like vLLM reads both."""
    inner = qc.get("quantization")
    cfg: Mapping[str, Any] = inner if isinstance(inner, Mapping) else qc
    algo = str(cfg.get("quant_algo") or qc.get("quant_algo") or "").upper()
    excluded = cfg.get("exclude_modules") or qc.get("ignore") or cfg.get("ignore") or ()
    attention = not any(m in str(name) for name in excluded for m in ATTENTION_MARKERS)
    kv = kv_cache_dtype(cfg) or kv_cache_dtype(qc)
    spec = _algo(algo, cfg)
    return replace(spec, attention_quantized=attention, kv_cache_dtype=kv)


def _algo(algo: str, cfg: Mapping[str, Any]) -> QuantSpec:
    if algo in ("NVFP4", "W4A16_NVFP4"):
        group = int(cfg.get("group_size") or NVFP4_GROUP)
        # uint8 pairs of fp4, an fp8 scale per group, fp32 weight_scale_2 and input_scale
        return QuantSpec("modelopt_fp4", 4, group, 1, 0, tensor_scale_bytes=8, float_weights=True)
    if algo == "FP8":
        return QuantSpec("modelopt", 8, 0, 4, 0, tensor_scale_bytes=4)
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return QuantSpec("modelopt", 8, -1, 4, 0)
    if algo == "FP8_PB_WO":
        return QuantSpec("modelopt", 8, -1, 4, 0, block=(128, 128))
    if algo == "MXFP8":
        return QuantSpec("modelopt_mxfp8", 8, MXFP8_GROUP, 1, 0)
    what = "MIXED_PRECISION (a format per layer)" if algo == "MIXED_PRECISION" else repr(algo)
    return QuantSpec(
        "modelopt",
        4,
        NVFP4_GROUP,
        1,
        0,
        tensor_scale_bytes=8,
        float_weights=True,
        warning=(
            f"ModelOpt quant_algo {what} is not sized layer by layer: every quantized weight "
            "is estimated as NVFP4 (4 bits and an fp8 scale per 16 weights)"
        ),
    )


def kv_cache_dtype(cfg: Mapping[str, Any]) -> str:
    """vLLM's get_kv_cache_quant_algo_string: the KV dtype a modelopt checkpoint asks for."""
    algo = cfg.get("kv_cache_scheme") or cfg.get("kv_cache_quant_algo")
    if isinstance(algo, Mapping):
        if algo.get("num_bits") == 8 and algo.get("type") == "float" and not algo.get("dynamic"):
            return "fp8"
        return ""
    return "fp8" if isinstance(algo, str) and algo.upper() == "FP8" else ""

"""Weight quantization: what a checkpoint's ``quantization_config`` (or ``--quantization``) does
to the bytes of each linear layer once vLLM has loaded it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deployments.planning.errors import ModelSpecError

from . import modelopt
from .quantspec import QuantSpec as QuantSpec

INT_METHODS = frozenset({"awq", "awq_marlin", "auto_awq", "gptq", "gptq_marlin", "auto_gptq"})
FP8_METHODS = frozenset({"fp8", "fbgemm_fp8", "fp8_per_tensor", "fp8_per_channel", "fp8_per_block"})


def from_config(qc: Mapping[str, Any]) -> QuantSpec:
    """Read a Hugging Face ``quantization_config`` dict (or a ModelOpt hf_quant_config.json)."""
    method = str(qc.get("quant_method", "")).lower()
    if method.startswith("modelopt") or modelopt.is_modelopt(qc):
        return modelopt.from_config(qc)
    if method in INT_METHODS:
        return _int_quant(method, qc)
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if method in FP8_METHODS:
        block = qc.get("weight_block_size")
        return QuantSpec(method, 8, -1, 4, 0, block=tuple(block) if block else None)
    if method == "bitsandbytes":
        return _bitsandbytes(qc)
    if method in ("mxfp4", "gpt_oss_mxfp4"):
        return QuantSpec(
            "mxfp4", 4, 32, 1, 0, experts_only=True, attention_quantized=False, float_weights=True
        )
    return unknown(method or "(none given)", qc)


# vLLM 0.33's MXFP4 oracle (fused_moe/oracle/mxfp4.py) picks the OAI Triton kernel on Hopper,
# which pads only the per-rank intermediate size to 64; Blackwell's FlashInfer TRT-LLM kernel
# and Marlin pad hidden to 256 and intermediate to 128 (mxfp4_round_up_hidden_size_and_...).
# Start-ups of earlier versions on H100 loaded ~8 % more than the checkpoint, as Marlin's does.
TRITON_MXFP4_ON_HOPPER_FROM = (0, 33, 0)


# Ampere/Ada parts (SM80-89): below the OAI Triton kernel's SM90, so MXFP4 runs on Marlin
PRE_HOPPER_NAMES = ("a100", "a800", "a10", "a30", "a40", "a6000", "l40", "l4", "l20", "rtx", "3090")


def moe_alignment(
    quant: QuantSpec | None, version: tuple[int, int, int], generation: str
) -> tuple[int, int]:
    """(hidden, per-rank intermediate) multiples vLLM pads MXFP4 experts to for its kernel."""
    if quant is None or quant.method != "mxfp4":
        return 1, 1
    if generation == "hopper" and version >= TRITON_MXFP4_ON_HOPPER_FROM:
        return 1, 64
    return 256, 128


def gpu_generation(gpu_name: str, gpu_total_bytes: int) -> str:
    """``blackwell`` (named so, or more memory than any Hopper part's 141 GiB), ``ampere`` (an
    Ampere/Ada name) or ``hopper`` (the default: H100/H200 and unnamed what-if GPUs)."""
    name = gpu_name.lower()
    if any(m in name for m in ("b200", "b300", "gb200", "blackwell")) or (
        gpu_total_bytes >= 160 << 30
    ):
        return "blackwell"
    if any(m in name for m in PRE_HOPPER_NAMES):
        return "ampere"
    return "hopper"


def unknown(method: str, qc: Mapping[str, Any]) -> QuantSpec:
    """Best estimate for a method the planner does not know, with the warning that says so."""
    bits = _int_or(
        qc.get("bits", qc.get("num_bits", qc.get("nbits", qc.get("w_bit")))),
        _bits_from_name(method),
    )
    group = _int_or(qc.get("group_size", qc.get("q_group_size")), 128)
    warning = (
        f"unknown quantization method {method!r}: weights estimated at {bits} bits with a "
        f"16-bit scale per {group} weights; vLLM may size them differently or refuse the method"
    )
    return QuantSpec(method, bits, group, 2, 0, warning=warning)


def _bits_from_name(method: str) -> int:
    for marker, bits in (("fp4", 4), ("int4", 4), ("w4", 4), ("fp8", 8), ("int8", 8), ("w8", 8)):
        if marker in method:
            return bits
    return 4  # most quantized checkpoints on the Hub are 4-bit


def _int_or(value: Any, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if 0 < number <= 1 << 20 else default


def runtime(method: str) -> QuantSpec:
    """``--quantization`` given at launch on an unquantized checkpoint (online fp8)."""
    if method in FP8_METHODS or method == "online":
        return QuantSpec("fp8", 8, 0, 4, 0)
    raise ModelSpecError(
        f"--quantization {method} needs a checkpoint quantized with it (only fp8 is applied online)"
    )


def _int_quant(method: str, qc: Mapping[str, Any]) -> QuantSpec:
    bits = int(qc.get("bits", qc.get("w_bit", 4)))
    group = int(qc.get("group_size", qc.get("q_group_size", 128)))
    zero = bool(qc.get("zero_point", True)) if "awq" in method else not qc.get("sym", True)
    return QuantSpec(method.replace("auto_", ""), bits, group, 2, bits if zero else 0)


def _compressed_tensors(qc: Mapping[str, Any]) -> QuantSpec:
    groups = qc.get("config_groups")
    first = next(iter(groups.values()), None) if isinstance(groups, Mapping) and groups else None
    weights = first.get("weights") if isinstance(first, Mapping) else None
    if not isinstance(weights, Mapping):
        raise ModelSpecError("compressed-tensors config without config_groups.*.weights")
    bits = int(weights.get("num_bits", 8))
    strategy = str(weights.get("strategy", "tensor"))
    group = {"tensor": 0, "channel": -1}.get(strategy, int(weights.get("group_size") or 128))
    block = weights.get("block_structure") if strategy == "block" else None
    zero = 0 if weights.get("symmetric", True) else bits
    if weights.get("type") == "float" and bits == 4:
        # nvfp4: an fp8 scale per 16 weights plus the fp32 global weight and input scales
        return QuantSpec(
            "compressed-tensors", 4, group, 1, 0, tensor_scale_bytes=8, float_weights=True
        )
    scale = 4 if weights.get("type") == "float" else 2
    return QuantSpec("compressed-tensors", bits, group, scale, zero, block=_pair(block))


def _bitsandbytes(qc: Mapping[str, Any]) -> QuantSpec:
    if qc.get("load_in_8bit"):
        return QuantSpec("bitsandbytes", 8, -1, 4, 0)
    double = bool(qc.get("bnb_4bit_use_double_quant", False))
    # absmax per 64 weights: fp32, or uint8 plus one fp32 per 256 blocks with double quant
    return QuantSpec("bitsandbytes", 4, 64, 1 if double else 4, 0)


def _pair(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        return int(value[0]), int(value[1])
    return None


def ignored_modules(qc: Mapping[str, Any]) -> tuple[str, ...]:
    """Module names a quantized checkpoint keeps unquantized (``ignore``/``modules_to_not_convert``)."""
    names = qc.get("ignore") or qc.get("modules_to_not_convert") or ()
    return tuple(str(n) for n in names)


def with_hf_quant_config(
    config: Mapping[str, Any], hf_quant_config: Mapping[str, Any]
) -> dict[str, Any]:
    """config.json with ModelOpt's separate hf_quant_config.json as its quantization_config,
    as vLLM's transformers_utils/config.py does when config.json has none (ModelOpt <= 0.29)."""
    merged = dict(config)
    if not isinstance(merged.get("quantization_config"), Mapping):
        merged["quantization_config"] = dict(hf_quant_config)
    return merged

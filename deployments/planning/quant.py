"""Weight quantization: what a checkpoint's ``quantization_config`` (or ``--quantization``) does
to the bytes of each linear layer once vLLM has loaded it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ModelSpecError

INT_METHODS = frozenset({"awq", "awq_marlin", "auto_awq", "gptq", "gptq_marlin", "auto_gptq"})
FP8_METHODS = frozenset({"fp8", "fbgemm_fp8", "fp8_per_tensor", "fp8_per_channel", "fp8_per_block"})


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """How one quantized linear weight is stored per element, plus its per-group extras."""

    method: str
    weight_bits: int
    group_size: int  # -1: one scale per output channel; 0: one per tensor
    scale_bytes: int
    zero_bits: int  # bits of a zero point per group (0: symmetric)
    experts_only: bool = False  # mxfp4: only MoE experts are quantized
    block: tuple[int, int] | None = None  # fp8 block-wise scales

    def linear_bytes(self, in_features: int, out_features: int) -> int:
        """Bytes of a quantized ``in_features × out_features`` weight with its scales/zeros."""
        weight = in_features * out_features * self.weight_bits // 8
        groups = self._groups(in_features, out_features)
        return weight + groups * self.scale_bytes + groups * self.zero_bits // 8

    def _groups(self, in_features: int, out_features: int) -> int:
        if self.block is not None:
            return -(-out_features // self.block[0]) * -(-in_features // self.block[1])
        if self.group_size == 0:
            return 1
        if self.group_size < 0:
            return out_features
        return -(-in_features // self.group_size) * out_features


def from_config(qc: Mapping[str, Any]) -> QuantSpec:
    """Read a Hugging Face ``quantization_config`` dict."""
    method = str(qc.get("quant_method", "")).lower()
    if method in INT_METHODS:
        return _int_quant(method, qc)
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if method in FP8_METHODS:
        block = qc.get("weight_block_size")
        return QuantSpec(method, 8, -1, 4, 0, block=tuple(block) if block else None)
    if method == "bitsandbytes":
        return _bitsandbytes(qc)
    if method == "mxfp4":
        return QuantSpec("mxfp4", 4, 32, 1, 0, experts_only=True)
    raise ModelSpecError(f"unsupported quantization method {method!r} in quantization_config")


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

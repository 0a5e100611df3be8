"""Pure readings of Hub metadata and config.json: quantization, context length, sizes, licence."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Bytes per element of each safetensors dtype.
DTYPE_BYTES: dict[str, int] = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "F4": 1,  # packed fp4 elements are stored as bytes
}

_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "max_seq_len",
    "seq_length",
    "n_ctx",
)
_TAG_METHODS = ("awq", "gptq", "fp8")
_FP8_METHODS = {"fp8", "fbgemm_fp8", "ptpc_fp8", "modelopt"}


def weights_bytes_from_params(parameters_by_dtype: Mapping[str, int]) -> int | None:
    if not parameters_by_dtype:
        return None
    return sum(count * DTYPE_BYTES.get(dtype, 2) for dtype, count in parameters_by_dtype.items())


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def context_length(config: Mapping[str, Any] | None) -> int | None:
    if not config:
        return None
    for source in (_text_config(config), config):
        for key in _CONTEXT_KEYS:
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


def torch_dtype(config: Mapping[str, Any] | None) -> str | None:
    if not config:
        return None
    for source in (config, _text_config(config)):
        value = source.get("dtype") or source.get("torch_dtype")
        if isinstance(value, str):
            return value
    return None


def architecture(config: Mapping[str, Any] | None) -> str | None:
    architectures = (config or {}).get("architectures") or []
    return str(architectures[0]) if architectures else None


def _compressed_tensors_method(qc: Mapping[str, Any]) -> str | None:
    for group in (qc.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        if weights.get("type") == "float" and weights.get("num_bits") == 8:
            return "fp8"
    return None


def quantization(config: Mapping[str, Any] | None, tags: Iterable[str] = ()) -> str | None:
    """The checkpoint's quantization method, normalised: awq, gptq, fp8, or the raw method name."""
    qc = (config or {}).get("quantization_config") or {}
    method = str(qc.get("quant_method") or "").lower()
    tag_set = {t.lower() for t in tags}
    if method == "compressed-tensors":
        return _compressed_tensors_method(qc) or ("fp8" if "fp8" in tag_set else method)
    if method in _FP8_METHODS:
        return "fp8"
    if method:
        return method
    return next((m for m in _TAG_METHODS if m in tag_set), None)


def license_of(tags: Iterable[str], card_license: str | None = None) -> str | None:
    if card_license:
        return card_license
    return next((t.removeprefix("license:") for t in tags if t.startswith("license:")), None)


def is_gguf_only(*, tags: Iterable[str], library_name: str | None, has_safetensors: bool) -> bool:
    """GGUF repos hold llama.cpp files only; vLLM needs a Transformers checkpoint."""
    if has_safetensors:
        return False
    return library_name == "gguf" or "gguf" in set(tags)


def num_parameters_filter(min_params: int | None, max_params: int | None) -> str | None:
    """The Hub's `num_parameters` range syntax, e.g. "min:6B,max:128B"."""
    parts = []
    if min_params is not None:
        parts.append(f"min:{_count(min_params)}")
    if max_params is not None:
        parts.append(f"max:{_count(max_params)}")
    return ",".join(parts) or None


def _count(value: int) -> str:
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def within(value: int | None, low: int | None, high: int | None) -> bool:
    if low is None and high is None:
        return True
    if value is None:
        return False
    return (low is None or value >= low) and (high is None or value <= high)

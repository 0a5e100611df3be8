"""The errors vLLM raises for a layout before it allocates anything, in the order it hits them."""

from __future__ import annotations

from deployments.planning.model.spec import ModelSpec

from .contextpar import dcp_errors
from .registry import removed_error
from .settings import Settings

LONG_LEN_HINT = "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."


def layout_errors(spec: ModelSpec, tp: int, pp: int, s: Settings) -> list[str]:
    """vLLM's own messages for a TP × PP layout that cannot start; empty when none apply."""
    removed = removed_error(spec.architectures, s.profile.version)
    if removed:
        return [removed]  # the model registry refuses before any config check
    errors = _config_errors(spec, tp, pp, s)
    if errors:
        return errors
    shard_error = next((e for e in _shard_errors(spec, tp, s) if e), None)
    return [shard_error] if shard_error else []


def _config_errors(spec: ModelSpec, tp: int, pp: int, s: Settings) -> list[str]:
    errors = []
    if s.max_model_len_given and s.max_model_len > spec.derived_max_model_len:
        errors.append(
            f"User-specified max_model_len ({s.max_model_len}) is greater than the derived "
            f"max_model_len ({spec.max_len_source} or model_max_length=None in model's "
            f"config.json). {LONG_LEN_HINT}"
        )
    if spec.num_heads % tp:
        errors.append(
            f"Total number of attention heads ({spec.num_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    if pp > spec.num_layers:
        errors.append(
            f"Pipeline parallel size ({pp}) is larger than the number of hidden layers "
            f"({spec.num_layers})."
        )
    return errors + dcp_errors(spec, tp, s.kv_rules.dcp)


def _shard_errors(spec: ModelSpec, tp: int, s: Settings) -> list[str | None]:
    """Assertions hit while building the layers: embedding, QKV, then MLP."""
    kv = spec.num_kv_heads
    checks: list[str | None] = [_divide(spec.padded_vocab_size, tp)]
    if spec.mla is None:
        checks.append(_divide(kv, tp) if tp < kv else _divide(tp, kv))
    if spec.moe is None or not all(spec.moe_layers):
        checks.append(_divide(spec.intermediate_size, tp))
    if spec.moe is not None:
        checks.append(_divide(spec.moe.expert_intermediate_size, tp))
    checks.append(_quant_alignment(spec, tp, s))
    return checks


def _divide(numerator: int, denominator: int) -> str | None:
    if numerator % denominator:
        return f"AssertionError: {numerator} is not divisible by {denominator}"
    return None


def _quant_alignment(spec: ModelSpec, tp: int, s: Settings) -> str | None:
    q = s.quant
    # MXFP4 experts are padded to the kernel's tile (quant.moe_alignment), never refused
    if q is None or q.group_size <= 0 or tp == 1 or q.experts_only:
        return None
    inputs = [spec.num_heads // tp * spec.head_dim, spec.intermediate_size // tp]
    if spec.moe is not None:
        inputs.append(spec.moe.expert_intermediate_size // tp)
    if any(n % q.group_size for n in inputs):
        return (
            "ValueError: The input size is not aligned with the quantized weight shape. "
            "This can be caused by too large tensor parallel size."
        )
    return None

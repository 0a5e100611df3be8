"""One line per way a model's weights are stored unlike a dense 16-bit transformer of the same
size (quantized formats, vision encoders), for the plan panel: an operator sees why the numbers
differ. Pure; the KV-cache side is memory/kvnotes.py."""

from __future__ import annotations

from collections.abc import Callable

from .spec import ModelSpec


def _quant_note(spec: ModelSpec) -> str:
    q = spec.quant
    if q is None:
        return ""
    half = "fp16" if spec.dtype == "float16" else "bf16"
    if q.method == "mxfp4":
        return f"FP4 experts, {half} attention (MXFP4: an 8-bit scale per 32 weights)"
    what = "NVFP4 weights (an fp8 scale per 16)" if q.fp4 else f"{q.weight_bits}-bit weights"
    parts = [what if q.attention_quantized else f"{what.split(' (')[0]}, {half} attention"]
    if q.kv_cache_dtype:
        parts.append(f"{q.kv_cache_dtype} KV cache, as the checkpoint asks")
    return "; ".join(parts)


def _vision_note(spec: ModelSpec) -> str:
    if not spec.vision_parameters:
        return ""
    return f"vision encoder: {spec.vision_parameters / 1e6:,.0f} M parameters in 16 bits"


NOTES: tuple[Callable[[ModelSpec], str], ...] = (_quant_note, _vision_note)


def format_notes(spec: ModelSpec) -> tuple[str, ...]:
    """What sets this model's weights apart; empty for a plain 16-bit transformer."""
    return tuple(note for rule in NOTES if (note := rule(spec)))

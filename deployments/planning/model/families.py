"""The family a model belongs to for the planner's accuracy report and the plan panel: what
makes vLLM size its memory differently from a dense transformer of the same size. Pure."""

from __future__ import annotations

from .layers import STATE_KINDS, Kind
from .spec import ModelSpec

FAMILIES = ("dense", "MoE", "MLA", "hybrid", "sliding window", "MXFP4/NVFP4", "VLM")


def model_family(spec: ModelSpec) -> str:
    """The family whose rules move the model's memory most: hybrid layers, then FP4 weights,
    then a vision encoder, then windows, MLA and experts."""
    kinds = spec.layer_plan.kinds() if spec.layer_plan is not None else frozenset()
    if kinds & STATE_KINDS:
        return "hybrid"
    if spec.quant is not None and spec.quant.fp4:  # the resolved format, not the method's name
        return "MXFP4/NVFP4"
    if spec.vision_parameters:
        return "VLM"
    if Kind.SLIDING in kinds or Kind.CHUNKED in kinds or any(spec.sliding_layers):
        return "sliding window"
    if spec.mla is not None:
        return "MLA"
    return "MoE" if spec.moe is not None else "dense"

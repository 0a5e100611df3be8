"""Decode context parallel (``--decode-context-parallel-size``): the checks vLLM 0.33 makes before
it starts (config/parallel.py, config/model.py verify_with_parallel_config), in its words. DCP
reuses the TP ranks to split each request's KV tokens, so every rank caches 1/dcp of them. Pure."""

from __future__ import annotations

from deployments.planning.model.layers import Kind
from deployments.planning.model.spec import ModelSpec


def dcp_errors(spec: ModelSpec, tp: int, dcp: int) -> list[str]:
    """vLLM's messages for a DCP size this model and TP cannot use; empty when none apply."""
    if dcp <= 1:
        return []
    if tp % dcp:
        return [f"tp_size={tp} must be divisible by dcp_size={dcp}."]
    if spec.mla is None:
        gqa = _gqa_errors(spec, tp, dcp)
        if gqa:
            return [gqa]
    plan = spec.layer_plan
    if plan is not None and plan.count(Kind.SLIDING):
        return ["DCP not support sliding window."]
    return []


def _gqa_errors(spec: ModelSpec, tp: int, dcp: int) -> str:
    kv = spec.num_kv_heads
    if tp <= kv:
        return (
            "Decode context parallelism for GQA/MQA requires `--tensor-parallel-size` "
            f"({tp}) to be greater than the model's total number of KV heads ({kv}). "
            "Increase `--tensor-parallel-size` or set `--decode-context-parallel-size 1`."
        )
    if dcp > tp // kv:
        return (
            f"`--decode-context-parallel-size` ({dcp}) exceeds the maximum supported value "
            f"({tp // kv}) for `--tensor-parallel-size` ({tp}) and {kv} model KV heads."
        )
    if (spec.num_heads // kv) % dcp:
        return (
            f"The model's number of query heads per KV head ({spec.num_heads // kv}) must be "
            f"divisible by `--decode-context-parallel-size` ({dcp}) for GQA/MQA."
        )
    return ""

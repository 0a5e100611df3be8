"""KV-cache geometry per rank, as vLLM V1's kv_cache_interface and kv_cache_utils size it; the
grouping of hybrid models (sliding, chunked, linear attention, Mamba) is in kvgroups.py."""

from __future__ import annotations

from deployments.planning.model.layers import STATE_KINDS, Kind, LayerCache, LayerPlan
from deployments.planning.model.spec import ModelSpec

from .kvgroups import Geometry, KvRules, StageKv, counted, per_token_bytes, stage_layout
from .weights import pp_layer_ranges

__all__ = ["StageKv", "kv_bytes_per_token", "kv_element_bytes", "layer_plan_of", "stage_kv"]


def kv_element_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per cached element: the model dtype for "auto", 1 for fp8 variants."""
    kind = kv_cache_dtype.lower()
    if kind == "auto":
        return model_dtype_bytes
    if kind.startswith("fp8") or kind.startswith("int8"):
        return 1
    if kind in ("float16", "bfloat16", "half"):
        return 2
    if kind in ("float32", "float"):
        return 4
    raise ValueError(f"unsupported kv-cache dtype {kv_cache_dtype!r}")


def layer_plan_of(spec: ModelSpec) -> LayerPlan:
    """The spec's per-layer caches; a spec built without config.json gets them from its flags."""
    if spec.layer_plan is not None:
        return spec.layer_plan
    if spec.mla is not None:
        mla = LayerCache(Kind.MLA, 1, spec.mla.latent_size)
        return LayerPlan(((mla,),) * spec.num_layers)
    full = LayerCache(Kind.FULL, spec.num_kv_heads, spec.head_dim)
    window = LayerCache(Kind.SLIDING, spec.num_kv_heads, spec.head_dim, spec.sliding_window or 0)
    return LayerPlan(
        tuple(
            (window,) if spec.is_sliding(i) and spec.sliding_window else (full,)
            for i in range(spec.num_layers)
        )
    )


def stage_kv(
    spec: ModelSpec,
    *,
    tp: int,
    pp: int,
    pp_rank: int,
    block_size: int,
    element_bytes: int,
    rules: KvRules | None = None,
) -> StageKv:
    """KV layout of stage ``pp_rank`` (each stage caches only its own layers)."""
    rules = rules or KvRules()
    plan = layer_plan_of(spec)
    layers = pp_layer_ranges(spec.num_layers, pp)[pp_rank]
    state = 0
    if plan.state:
        state = plan.state.bytes_per_sequence(
            tp,
            rules.state_dtype_bytes,
            default_ssm_bytes=rules.default_ssm_bytes,
            forced_ssm_bytes=rules.forced_ssm_bytes,
        )
    chunk = plan.state.chunk_size if plan.state else 0
    geo = Geometry(tp, block_size, element_bytes, state, rules.ds_mla, chunk)
    if plan.uniform is not None:
        return stage_layout([(plan.uniform, len(layers))], geo, rules, pp=pp)
    caches = counted(c for i in layers for c in plan.caches[i])
    return stage_layout(caches, geo, rules, pp=pp)


def kv_bytes_per_token(spec: ModelSpec, *, tp: int, element_bytes: int) -> int:
    """Textbook figure for the whole model on one TP rank: K and V of every attention layer
    (linear-attention and Mamba layers keep a fixed state instead, not counted here)."""
    caches = [c for layer in layer_plan_of(spec).caches for c in layer]
    return sum(per_token_bytes(c, tp, element_bytes) for c in caches if c.kind not in STATE_KINDS)

"""One-line notes for the plan panel on what makes a model's KV cache differ from a dense
transformer of the same size (per-sequence states, windows, chunks, latents). Pure."""

from __future__ import annotations

from deployments.planning.model.layers import Kind, LayerCache, LayerPlan
from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import MIB

from .kvcache import layer_plan_of


def layer_notes(spec: ModelSpec, *, tp: int = 1, dtype_bytes: int = 2) -> tuple[str, ...]:
    """The notes that apply to ``spec`` at tensor-parallel size ``tp``."""
    plan = layer_plan_of(spec)
    layers = spec.num_layers
    notes = [
        _state_note(plan, layers, tp, dtype_bytes),
        _window_note(plan, layers, Kind.SLIDING),
        _window_note(plan, layers, Kind.CHUNKED),
        _mla_note(plan, layers),
        _shared_note(plan, layers),
    ]
    return tuple(n for n in notes if n)


def _state_note(plan: LayerPlan, layers: int, tp: int, dtype_bytes: int) -> str:
    states = plan.count(Kind.LINEAR) + plan.count(Kind.MAMBA)
    if not states:
        return ""
    what = "Gated DeltaNet" if plan.count(Kind.LINEAR) else "Mamba"
    size = ""
    if plan.state is not None:
        size = f" of {plan.state.bytes_per_sequence(tp, dtype_bytes) / MIB:.2f} MiB per GPU"
    attn = layers - states if plan.count(Kind.FULL) else 0
    return (
        f"linear-attention state per sequence: {states} of {layers} layers ({what}) keep a fixed "
        f"state{size} instead of KV per token; vLLM pads it to the attention page and groups the "
        f"layers by kind, so only the {attn} attention layers grow with the context"
    )


def _of(plan: LayerPlan, kind: Kind) -> list[LayerCache]:
    return [c for layer in plan.caches for c in layer if c.kind is kind]


WINDOW_NOTES = {
    Kind.SLIDING: (
        "window-sized KV for local layers: {n} of {layers} layers attend through a "
        "{window}-token sliding window and hold only that many tokens (plus a batch in flight) "
        "per request"
    ),
    Kind.CHUNKED: (
        "chunked local attention on {n} of {layers} layers ({window}-token chunks): from vLLM "
        "0.14 its hybrid KV-cache manager keeps only the current chunk (plus a batch in flight) "
        "per request; before 0.14, or with VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0, "
        "they are cached at full length"
    ),
}


def _window_note(plan: LayerPlan, layers: int, kind: Kind) -> str:
    local = _of(plan, kind)
    if not local:
        return ""
    return WINDOW_NOTES[kind].format(n=len(local), layers=layers, window=local[0].window)


def _mla_note(plan: LayerPlan, layers: int) -> str:
    mla = _of(plan, Kind.MLA)
    if not mla:
        return ""
    extra = f" plus {mla[0].indexer_bytes} bytes of indexer keys" if mla[0].indexer_bytes else ""
    return (
        f"latent attention (MLA): one {mla[0].head_dim}-wide latent per token and layer{extra}, "
        "not split by tensor parallelism: every TP rank holds the whole KV cache "
        "(--decode-context-parallel-size splits its tokens instead)"
    )


def _shared_note(plan: LayerPlan, layers: int) -> str:
    shared = sum(1 for layer in plan.caches if not layer)
    if not shared or plan.count(Kind.MAMBA):
        return ""
    return f"{shared} of {layers} layers reuse an earlier layer's KV cache and keep none"

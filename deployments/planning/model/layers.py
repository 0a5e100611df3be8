"""Which cache each decoder layer keeps, read from config.json the way vLLM's model files build
their layers: full attention, a sliding window, chunked local attention, MLA's latent, a fixed
linear-attention / Mamba state per sequence, or none (MLP-only layers, KV-shared layers). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import config_fields as cf
from .states import LinearState, linear_state


class Kind(StrEnum):
    """What a layer caches per sequence."""

    FULL = "full attention"
    SLIDING = "sliding window"
    CHUNKED = "chunked local attention"
    MLA = "latent attention (MLA)"
    LINEAR = "linear attention"  # Gated DeltaNet (Qwen3-Next, Qwen3.5)
    MAMBA = "mamba"  # Mamba-1/2 SSM (Nemotron-H, Jamba, granite-4.0-h, Falcon-H1)


STATE_KINDS = frozenset({Kind.LINEAR, Kind.MAMBA})


@dataclass(frozen=True, slots=True)
class LayerCache:
    """One cache a layer owns; ``window`` is the sliding window or the attention chunk."""

    kind: Kind
    kv_heads: int = 0
    head_dim: int = 0
    window: int = 0
    indexer_bytes: int = 0  # DeepSeek-V3.2's sparse-attention indexer keys per token (fp8 + scales)


@dataclass(frozen=True, slots=True)
class LayerPlan:
    """Per layer, the caches it owns (none, one, or an attention and a Mamba cache side by side
    as in Falcon-H1), the shape of the per-sequence state, and what was guessed."""

    caches: tuple[tuple[LayerCache, ...], ...]
    state: LinearState | None = None
    warnings: tuple[str, ...] = ()
    blocks: str = ""  # hybrid_override_pattern: each layer is one of M, *, - or E alone
    gated_attention: bool = False  # Qwen3-Next / Qwen3.5: q_proj also emits an output gate

    @property
    def uniform(self) -> LayerCache | None:
        """The one cache every layer holds, when they all hold the same single one."""
        first = self.caches[0] if self.caches else ()
        if len(first) != 1 or any(layer != first for layer in self.caches):
            return None
        return first[0]

    def kinds(self) -> frozenset[Kind]:
        """Every kind of cache the model keeps."""
        return frozenset(c.kind for layer in self.caches for c in layer)

    def count(self, kind: Kind) -> int:
        """Caches of ``kind`` over the whole model."""
        return sum(1 for layer in self.caches for c in layer if c.kind is kind)


# Names config.json files use for a layer's kind, and what vLLM builds for each.
TYPE_NAMES: Mapping[str, Kind | None] = {
    "full_attention": Kind.FULL,
    "attention": Kind.FULL,
    "global": Kind.FULL,
    "sliding_attention": Kind.SLIDING,
    "local": Kind.SLIDING,
    "chunked_attention": Kind.CHUNKED,
    "linear_attention": Kind.LINEAR,
    "mamba": Kind.MAMBA,
    "mamba2": Kind.MAMBA,
    "mlp": None,
    "moe": None,
}
# hybrid_override_pattern (Nemotron-H): M Mamba-2, * attention, - MLP, E MoE.
PATTERN_CHARS: Mapping[str, Kind | None] = {"M": Kind.MAMBA, "*": Kind.FULL, "-": None, "E": None}
PARALLEL_HYBRID = frozenset({"falcon_h1"})  # attention and Mamba in every layer


def layer_plan(
    cfg: Mapping[str, Any],
    *,
    model_type: str,
    num_layers: int,
    kv_heads: int,
    head_dim: int,
    mla_latent: int,
    sliding: Sequence[bool],
    sliding_window: int | None,
) -> LayerPlan:
    """The caches of every layer; unknown layer kinds become full attention with a warning."""
    warnings: list[str] = []
    kinds = _kinds(cfg, model_type, num_layers, sliding, warnings)
    state = linear_state(cfg, model_type) if _has_state(kinds) else None
    if _has_state(kinds) and state is None:
        warnings.append(
            "config.json has linear-attention/Mamba layers but no state dimensions the planner "
            "knows; their per-sequence state is left out of the KV estimate"
        )
    shared = _kv_shared(cfg, num_layers)
    made: dict[LayerCache, LayerCache] = {}  # one object per distinct cache (kvgroups counts ids)
    caches = tuple(
        ()
        if i in shared
        else tuple(
            made.setdefault(c, c)
            for c in (
                _cache(cfg, k, kv_heads, head_dim, mla_latent, sliding_window) for k in kinds_i
            )
        )
        for i, kinds_i in enumerate(kinds)
    )
    pattern = cfg.get("hybrid_override_pattern")
    blocks = pattern if isinstance(pattern, str) and len(pattern) == num_layers else ""
    gated = bool(cfg.get("attn_output_gate", model_type == "qwen3_next"))
    return LayerPlan(caches, state, tuple(warnings), blocks, gated)


def _has_state(kinds: Sequence[tuple[Kind, ...]]) -> bool:
    return any(k in STATE_KINDS for layer in kinds for k in layer)


def _cache(
    cfg: Mapping[str, Any],
    kind: Kind,
    kv_heads: int,
    head_dim: int,
    mla_latent: int,
    window: int | None,
) -> LayerCache:
    if kind in STATE_KINDS:
        return LayerCache(kind)
    if mla_latent:
        return LayerCache(Kind.MLA, 1, mla_latent, indexer_bytes=_indexer_bytes(cfg))
    if kind is Kind.SLIDING and window:
        return LayerCache(kind, kv_heads, head_dim, window)
    if kind is Kind.SLIDING:  # layer_types names a window that use_sliding_window turns off
        return LayerCache(Kind.FULL, kv_heads, head_dim)
    if kind is Kind.CHUNKED:
        return LayerCache(kind, kv_heads, head_dim, int(cfg.get("attention_chunk_size") or 0))
    # Gemma 4: global layers have their own head width, and their own KV heads only where
    # attention_k_eq_v (transformers 5.20-5.23 Gemma4TextConfig.per_layer_config)
    own = cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads")
    heads = int(own or kv_heads)
    return LayerCache(kind, heads, int(cfg.get("global_head_dim") or head_dim))


def _indexer_bytes(cfg: Mapping[str, Any]) -> int:
    """DeepseekV32IndexerCache: head_dim fp8 values plus a 4-byte scale per 128 of them; vLLM
    packs it beside the latent in each block (block-outermost layout), so it adds per token."""
    if not cfg.get("index_topk"):
        return 0
    head = cf.int_field(cfg, "index_head_dim", default=128)
    return head + head // 128 * 4


def _kv_shared(cfg: Mapping[str, Any], num_layers: int) -> range:
    """Layers that read an earlier layer's KV cache and keep none (Gemma 3n/4)."""
    shared = int(cfg.get("num_kv_shared_layers") or 0)
    return range(num_layers - shared, num_layers) if 0 < shared < num_layers else range(0)


def _kinds(
    cfg: Mapping[str, Any],
    model_type: str,
    n: int,
    sliding: Sequence[bool],
    warnings: list[str],
) -> list[tuple[Kind, ...]]:
    named = _named_kinds(cfg, n, warnings)
    if named is not None:
        return [(k,) if k else () for k in named]
    if model_type in PARALLEL_HYBRID:
        return [(Kind.FULL, Kind.MAMBA)] * n
    return [(k,) for k in _patterned(cfg, model_type, n, sliding)]


def _named_kinds(cfg: Mapping[str, Any], n: int, warnings: list[str]) -> list[Kind | None] | None:
    """Kinds from a per-layer list or pattern string, when the config has one."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == n:
        return [_lookup(PATTERN_CHARS, ch, i, warnings) for i, ch in enumerate(pattern)]
    for key in ("layer_types", "layers_block_type"):
        names = cfg.get(key)
        if isinstance(names, list) and len(names) == n:
            return [_lookup(TYPE_NAMES, str(t), i, warnings) for i, t in enumerate(names)]
    types = cfg.get("attn_type_list")
    if isinstance(types, list) and len(types) == n:
        # MiniMax: 0 lightning (linear) attention, 1 softmax attention
        return [Kind.FULL if t == 1 else Kind.LINEAR for t in types]
    return None


def _lookup(
    table: Mapping[str, Kind | None], name: str, i: int, warnings: list[str]
) -> Kind | None:
    if name in table:
        return table[name]
    if not any(name in w for w in warnings):
        warnings.append(
            f"layer kind {name!r} (layer {i} and maybe others) is unknown to the planner: "
            "estimated as full attention"
        )
    return Kind.FULL


def _patterned(
    cfg: Mapping[str, Any], model_type: str, n: int, sliding: Sequence[bool]
) -> list[Kind]:
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:  # Qwen3-Next: every 4th layer is attention
        return [Kind.FULL if (i + 1) % interval == 0 else Kind.LINEAR for i in range(n)]
    period = cfg.get("attn_layer_period")
    if isinstance(period, int) and period > 0:  # Jamba
        offset = int(cfg.get("attn_layer_offset") or 0)
        return [Kind.FULL if i % period == offset else Kind.MAMBA for i in range(n)]
    if cfg.get("attention_chunk_size"):  # Llama 4: NoPE layers attend globally
        return [Kind.FULL if _nope(cfg, i) else Kind.CHUNKED for i in range(n)]
    if model_type in ("mamba", "mamba2", "falcon_mamba"):
        return [Kind.MAMBA] * n
    return [Kind.SLIDING if sliding and sliding[i] else Kind.FULL for i in range(n)]


def _nope(cfg: Mapping[str, Any], i: int) -> bool:
    flags = cfg.get("no_rope_layers")
    if isinstance(flags, list) and i < len(flags):
        return bool(flags[i] == 0)
    interval = cf.int_field(cfg, "no_rope_layer_interval", default=4)
    return (i + 1) % interval == 0

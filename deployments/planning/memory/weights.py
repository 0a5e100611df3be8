"""Weight bytes on one GPU rank, sharded the way vLLM's parallel layers shard them."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.model.layers import Kind
from deployments.planning.model.quantspec import QuantSpec
from deployments.planning.model.spec import MlaSpec, ModelSpec, MoeSpec
from deployments.planning.model.vision import tower_split_by_tp

from .mixers import layer_parts

EXPERT_BIAS = frozenset({"gpt_oss"})  # models whose routed experts carry biases


@dataclass(frozen=True, slots=True)
class Shard:
    """Where a rank sits: its tensor-parallel width and its pipeline stage."""

    tp: int
    pp: int
    pp_rank: int
    dtype_bytes: int
    quant: QuantSpec | None
    moe_align: tuple[int, int] = (1, 1)  # kernel padding of (hidden, intermediate) in experts

    @property
    def is_first(self) -> bool:
        """First pipeline stage: holds the embedding."""
        return self.pp_rank == 0

    @property
    def is_last(self) -> bool:
        """Last pipeline stage: holds the final norm, LM head and sampler."""
        return self.pp_rank == self.pp - 1

    def linear(
        self, in_features: int, out_features: int, *, expert: bool = False, attention: bool = False
    ) -> int:
        """Bytes of one linear weight as stored on this rank."""
        q = self.quant
        if (
            q is None
            or (q.experts_only and not expert)
            or (attention and not q.attention_quantized)
        ):
            return in_features * out_features * self.dtype_bytes
        return q.linear_bytes(in_features, out_features)


def pp_layer_ranges(num_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices: equal parts, the remainder going to the stages before the last."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    starts = [sum(parts[:i]) for i in range(pp)]
    return [range(s, s + n) for s, n in zip(starts, parts, strict=True)]


def kv_heads_per_rank(spec: ModelSpec, tp: int) -> int:
    """``max(1, kv_heads // tp)``: KV heads are replicated once TP exceeds them."""
    return max(1, spec.num_kv_heads // tp)


def rank_weights_bytes(spec: ModelSpec, shard: Shard) -> int:
    """All parameters and persistent buffers a rank allocates when loading the model."""
    layers = pp_layer_ranges(spec.num_layers, shard.pp)[shard.pp_rank]
    total = sum(_layer_bytes(spec, shard, i) for i in layers)
    total += _vocab_bytes(spec, shard)
    if shard.is_last:
        total += _norm_bytes(spec, shard)
    rope = spec.rope_cache_len * spec.rotary_dim * shard.dtype_bytes * spec.rope_caches
    # vLLM's own encoders are tensor-parallel too (mm_encoder_tp_mode "weights")
    vision = spec.vision_parameters * shard.dtype_bytes
    split = tower_split_by_tp(spec.architectures)
    return total + rope + (vision // shard.tp if split else vision)


def _vocab_bytes(spec: ModelSpec, shard: Shard) -> int:
    rows = spec.padded_vocab_size // shard.tp
    table = rows * spec.hidden_size * shard.dtype_bytes
    total = table if shard.is_first else 0
    if shard.is_first and spec.extra_embedding_rows:  # replicated, not vocab-parallel
        total += spec.extra_embedding_rows * spec.hidden_size * shard.dtype_bytes
    if spec.pooling is not None:
        return total  # the pooling runner builds no LM head (vLLM adapters.py:145-152)
    if shard.is_last and not (spec.tie_word_embeddings and shard.is_first):
        total += table  # untied LM head, or the last stage's own copy of a tied embedding
    if shard.is_last and spec.lm_head_bias:
        total += rows * shard.dtype_bytes
    return total


def _norm_bytes(spec: ModelSpec, shard: Shard) -> int:
    return spec.hidden_size * shard.dtype_bytes * (2 if spec.norm_has_bias else 1)


def _layer_bytes(spec: ModelSpec, shard: Shard, layer: int) -> int:
    parts = layer_parts(spec, shard, layer)  # hybrid layers: mixers.py
    attn = _mla_bytes(spec, shard, spec.mla) if spec.mla else _attention_bytes(spec, shard, layer)
    attn = (attn if parts.attention else 0) + parts.mixer_bytes
    moe = (
        spec.moe if parts.mlp == "moe" or (parts.mlp == "default" and spec.is_moe(layer)) else None
    )
    mlp = _moe_bytes(spec, shard, moe) if moe else _dense_mlp_bytes(spec, shard)
    mlp = 0 if parts.mlp == "none" else mlp
    norms = spec.norms_per_layer * _norm_bytes(spec, shard)
    return attn + mlp + norms


def attention_geometry(spec: ModelSpec, layer: int) -> tuple[int, int]:
    """(KV heads, head width) of ``layer``'s attention. Gemma 4's full-attention layers have
    their own: vLLM 0.33 models/gemma4.py ``Gemma4DecoderLayer`` builds each layer from
    ``config.per_layer_config[i]`` (transformers' Gemma4TextConfig: ``global_head_dim``, and
    ``num_global_key_value_heads`` when ``attention_k_eq_v``), and ``Gemma4Attention``'s
    QKVParallelLinear keeps a V slot even where K is loaded into both (k_eq_v)."""
    plan = spec.layer_plan
    if plan is not None and layer < len(plan.caches):
        for c in plan.caches[layer]:
            if c.kind is Kind.FULL and c.head_dim and c.head_dim != spec.head_dim:
                return c.kv_heads, c.head_dim
    return spec.num_kv_heads, spec.head_dim


def _attention_bytes(spec: ModelSpec, shard: Shard, layer: int = 0) -> int:
    kv_heads, d = attention_geometry(spec, layer)
    h, b = spec.hidden_size, shard.dtype_bytes
    q_heads = spec.num_heads // shard.tp
    qkv_out = (q_heads + 2 * max(1, kv_heads // shard.tp)) * d
    qkv = shard.linear(h, qkv_out, attention=True)
    total = qkv + shard.linear(q_heads * d, h, attention=True)
    total += qkv_out * b if spec.qkv_bias else 0
    total += h * b if spec.o_bias else 0
    return total + (2 * d * b if spec.qk_norm else 0)


def _mla_bytes(spec: ModelSpec, shard: Shard, m: MlaSpec) -> int:
    h, b = spec.hidden_size, shard.dtype_bytes
    heads = spec.num_heads // shard.tp
    q_width = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    if m.q_lora_rank:
        q = shard.linear(h, m.q_lora_rank, attention=True)
        q += shard.linear(m.q_lora_rank, q_width, attention=True)
        q += m.q_lora_rank * b
    else:
        q = shard.linear(h, q_width, attention=True)
    kv_b_out = heads * (m.qk_nope_head_dim + m.v_head_dim)
    kv = (
        shard.linear(h, m.latent_size, attention=True)
        + m.kv_lora_rank * b
        + shard.linear(m.kv_lora_rank, kv_b_out, attention=True)
    )
    # W_UK_T / W_UV: vLLM keeps 16-bit copies of kv_b_proj for the absorbed decode path
    absorbed = m.kv_lora_rank * kv_b_out * 2
    return q + kv + absorbed + shard.linear(heads * m.v_head_dim, h, attention=True)


def _dense_mlp_bytes(spec: ModelSpec, shard: Shard) -> int:
    return _mlp_bytes(spec, shard, spec.intermediate_size // shard.tp, expert=False)


def _mlp_bytes(spec: ModelSpec, shard: Shard, inter: int, *, expert: bool) -> int:
    h, b = spec.hidden_size, shard.dtype_bytes
    up = 2 * inter if spec.gated_mlp else inter
    total = shard.linear(h, up, expert=expert) + shard.linear(inter, h, expert=expert)
    return total + ((inter + h) * b if spec.mlp_bias else 0)


def _moe_bytes(spec: ModelSpec, shard: Shard, moe: MoeSpec) -> int:
    h, b = spec.hidden_size, shard.dtype_bytes
    expert = _expert_bytes(spec, shard, moe.expert_intermediate_size // shard.tp)
    router = moe.num_experts * h * b + (moe.num_experts * 4 if moe.router_bias else 0)
    shared = 0
    if moe.shared_intermediate_size:
        shared = _mlp_bytes(spec, shard, moe.shared_intermediate_size // shard.tp, expert=False)
        shared += h * b if moe.shared_expert_gate else 0
    return moe.num_experts * expert + router + shared


def _expert_bytes(spec: ModelSpec, shard: Shard, inter: int) -> int:
    """One routed expert, padded the way the MoE kernel wants it (MXFP4), with its biases."""
    h_align, i_align = shard.moe_align
    h = -(-spec.hidden_size // h_align) * h_align
    inter = -(-inter // i_align) * i_align
    up = 2 * inter if spec.gated_mlp else inter
    total = shard.linear(h, up, expert=True) + shard.linear(inter, h, expert=True)
    if spec.model_type in EXPERT_BIAS:
        # gpt-oss's w13/w2 biases; the Triton and TRT-LLM MXFP4 kernels take them in fp32
        bias_bytes = 4 if shard.quant is not None and shard.quant.method == "mxfp4" else 2
        total += (up + h) * bias_bytes
    return total + ((inter + h) * shard.dtype_bytes if spec.mlp_bias else 0)

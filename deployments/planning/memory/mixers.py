"""Weights of the layers that are not "attention + MLP": Gated DeltaNet and Mamba mixers in
place of attention, and Nemotron-H's single-block layers (Mamba, attention, MLP or MoE alone),
as vLLM's mamba_mixer2.py, mamba_mixer.py, gdn/qwen_gdn_linear_attn.py and nemotron_h.py build
them. weights.py asks for the parts of each layer here. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from deployments.planning.model.layers import STATE_KINDS, Kind, LayerPlan
from deployments.planning.model.spec import ModelSpec
from deployments.planning.model.states import GDN, MAMBA1, MAMBA2, LinearState

FP32 = 4


class Shard(Protocol):
    """weights.Shard as seen from here (weights.py imports this module)."""

    @property
    def tp(self) -> int: ...

    @property
    def dtype_bytes(self) -> int: ...

    def linear(self, in_features: int, out_features: int, *, expert: bool = False) -> int: ...


@dataclass(frozen=True, slots=True)
class LayerParts:
    """What one decoder layer holds besides its norms."""

    attention: bool = True
    mixer_bytes: int = 0  # linear-attention / Mamba mixer, and Qwen3-Next's attention gate
    mlp: str = "default"  # "default" (the spec's MoE flags decide), "dense", "moe" or "none"


BLOCK_PARTS = {
    "M": LayerParts(attention=False, mlp="none"),
    "*": LayerParts(attention=True, mlp="none"),
    "-": LayerParts(attention=False, mlp="dense"),
    "E": LayerParts(attention=False, mlp="moe"),
}


def layer_parts(spec: ModelSpec, shard: Shard, layer: int) -> LayerParts:
    """The parts of ``layer`` on this rank; plain attention + MLP for ordinary models."""
    plan = spec.layer_plan
    if plan is None:
        return LayerParts()
    kinds = {c.kind for c in plan.caches[layer]}
    mixer = _mixer_bytes(spec, plan.state, shard) if kinds & STATE_KINDS else 0
    if plan.gated_attention and Kind.FULL in kinds:
        mixer += shard.linear(spec.hidden_size, spec.num_heads // shard.tp * spec.head_dim)
    if plan.blocks:
        base = BLOCK_PARTS.get(plan.blocks[layer], LayerParts())
        return LayerParts(base.attention, mixer, base.mlp)
    return LayerParts(attention=_has_attention(plan, layer, kinds), mixer_bytes=mixer)


def _has_attention(plan: LayerPlan, layer: int, kinds: set[Kind]) -> bool:
    return not kinds or bool(kinds - STATE_KINDS)


def _mixer_bytes(spec: ModelSpec, state: LinearState | None, shard: Shard) -> int:
    if state is None:
        return 0
    if state.flavor == GDN:
        return _gdn(spec, state, shard)
    if state.flavor == MAMBA2:
        return _mamba2(spec, state, shard)
    if state.flavor == MAMBA1:
        return _mamba1(spec, state, shard)
    return 0


def _gdn(spec: ModelSpec, st: LinearState, shard: Shard) -> int:
    """in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, the gated norm, out_proj."""
    tp, b = shard.tp, shard.dtype_bytes
    value_dim = st.heads * st.head_dims[0]
    key_dim = (st.conv_dim - value_dim) // 2
    heads = st.heads // tp
    qkvz = shard.linear(spec.hidden_size, (2 * key_dim + 2 * value_dim) // tp)
    ba = shard.linear(spec.hidden_size, 2 * heads)
    conv = st.conv_dim // tp * st.conv_kernel * b
    out = shard.linear(value_dim // tp, spec.hidden_size)
    return qkvz + ba + conv + 2 * heads * FP32 + st.head_dims[0] * b + out


def _mamba2(spec: ModelSpec, st: LinearState, shard: Shard) -> int:
    """in_proj (z, x, B, C, dt), conv1d with bias, A / D / dt_bias, gated norm, out_proj."""
    tp, b = shard.tp, shard.dtype_bytes
    groups = st.n_groups if st.n_groups % tp == 0 else tp
    conv_dim = st.conv_dim + 2 * groups * st.state_size
    in_proj = shard.linear(spec.hidden_size, (st.conv_dim + conv_dim + st.heads) // tp)
    conv = conv_dim // tp * (st.conv_kernel + 1) * b
    norm = st.conv_dim // tp * b
    out = shard.linear(st.conv_dim // tp, spec.hidden_size)
    return in_proj + conv + 3 * (st.heads // tp) * FP32 + norm + out


def _mamba1(spec: ModelSpec, st: LinearState, shard: Shard) -> int:
    """Jamba: in_proj, conv1d, x_proj, dt_proj, A, D, out_proj (channels split over TP)."""
    tp, b = shard.tp, shard.dtype_bytes
    inner, state = st.conv_dim // tp, st.head_dims[1]
    dt_rank = -(-spec.hidden_size // 16)
    in_proj = shard.linear(spec.hidden_size, 2 * inner)
    conv = inner * (st.conv_kernel + 1) * b
    x_proj = shard.linear(inner, dt_rank + 2 * state)
    dt_proj = shard.linear(dt_rank, inner) + inner * b
    a_d = inner * state * FP32 + inner * FP32
    return in_proj + conv + x_proj + dt_proj + a_d + shard.linear(inner, spec.hidden_size)

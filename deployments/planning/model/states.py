"""The fixed per-sequence state of a linear-attention or Mamba layer on one TP rank, as vLLM's
MambaStateShapeCalculator (model_executor/layers/mamba/mamba_utils.py) and each model's
get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config size it. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from deployments.planning.errors import PlanningError
from deployments.planning.units import canonical_dtype, dtype_bytes

GDN = "gated deltanet"
MAMBA2 = "mamba2"
MAMBA1 = "mamba1"
# Models whose vLLM config hook defaults the SSM state when config.json names none
# (NemotronHForCausalLMConfig): float32 from 0.20, float16 in 0.13-0.19 (KvRules).
SSM_FP32_DEFAULT = frozenset({"nemotron_h"})


@dataclass(frozen=True, slots=True)
class LinearState:
    """Dimensions of one layer's state, before TP; dtypes None follow the model's dtype."""

    flavor: str
    conv_dim: int  # channels of the causal-conv state (before any group replication)
    conv_kernel: int
    heads: int  # SSM / value heads, split over TP
    head_dims: tuple[int, int]  # the two inner dims of the temporal state
    n_groups: int = 0  # Mamba-2 B/C groups, replicated when TP does not divide them
    state_size: int = 0
    ssm_dtype: str | None = None
    conv_dtype: str | None = None
    chunk_size: int = 0  # mamba_chunk_size / chunk_size (vLLM get_mamba_chunk_size)
    ssm_dtype_defaulted: bool = False  # ssm_dtype is vLLM's default for the model, not config's

    def bytes_per_sequence(
        self,
        tp: int,
        model_dtype_bytes: int,
        *,
        default_ssm_bytes: int | None = None,
        forced_ssm_bytes: int = 0,
    ) -> int:
        """Conv state plus temporal (SSM / delta-rule) state of one sequence on one rank;
        ``default_ssm_bytes``: the target version's default where the config names none;
        ``forced_ssm_bytes``: a dtype the platform forces on the SSM cache."""
        conv_elt = dtype_bytes(self.conv_dtype) if self.conv_dtype else model_dtype_bytes
        ssm_elt = dtype_bytes(self.ssm_dtype) if self.ssm_dtype else conv_elt
        if self.ssm_dtype_defaulted and default_ssm_bytes:
            ssm_elt = default_ssm_bytes
        ssm_elt = forced_ssm_bytes or ssm_elt
        conv = self._conv_channels(tp) // tp * (self.conv_kernel - 1) * conv_elt
        a, b = self.head_dims
        return conv + max(1, self.heads // tp) * a * b * ssm_elt

    def _conv_channels(self, tp: int) -> int:
        if self.flavor != MAMBA2:
            return self.conv_dim
        groups = self.n_groups if self.n_groups % tp == 0 else tp  # extra_groups_for_head_shards
        return self.conv_dim + 2 * groups * self.state_size


def linear_state(cfg: Mapping[str, Any], model_type: str) -> LinearState | None:
    """The state shape for the model's linear/SSM layers, or None when the config lacks it."""
    ssm = _dtype(cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype"))
    defaulted = ssm is None and model_type in SSM_FP32_DEFAULT
    if defaulted:
        ssm = "float32"
    state = None
    if cfg.get("linear_num_value_heads"):
        state = _gdn(cfg, ssm)
    elif cfg.get("mamba_num_heads") or cfg.get("mamba_n_heads"):
        state = _mamba2(cfg, ssm)
    elif cfg.get("mamba_d_state") or cfg.get("state_size"):
        state = _mamba1(cfg, ssm)
    return replace(state, ssm_dtype_defaulted=defaulted) if state and defaulted else state


def _dtype(value: object) -> str | None:
    if not isinstance(value, str) or value == "auto":
        return None
    try:
        return canonical_dtype(value)
    except PlanningError:
        return None


def _int(cfg: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return int(value)
    return default


def _gdn(cfg: Mapping[str, Any], ssm: str | None) -> LinearState:
    """Qwen3-Next / Qwen3.5: gated_delta_net_state_shape."""
    nk, nv = _int(cfg, "linear_num_key_heads"), _int(cfg, "linear_num_value_heads")
    hk, hv = _int(cfg, "linear_key_head_dim"), _int(cfg, "linear_value_head_dim")
    return LinearState(
        flavor=GDN,
        conv_dim=hk * nk * 2 + hv * nv,
        conv_kernel=_int(cfg, "linear_conv_kernel_dim", default=4),
        heads=nv,
        head_dims=(hv, hk),
        ssm_dtype=ssm,
    )


def _mamba2(cfg: Mapping[str, Any], ssm: str | None) -> LinearState:
    """Nemotron-H, granite-4.0-h, Falcon-H1, Bamba: mamba2_state_shape."""
    heads = _int(cfg, "mamba_num_heads", "mamba_n_heads")
    head_dim = _int(cfg, "mamba_head_dim", "mamba_d_head")
    state = _int(cfg, "ssm_state_size", "mamba_d_state", default=128)
    inner = _int(cfg, "mamba_d_ssm") or heads * head_dim
    if cfg.get("mamba_expand") and not cfg.get("mamba_d_ssm") and not cfg.get("mamba_num_heads"):
        inner = int(float(cfg["mamba_expand"]) * _int(cfg, "hidden_size"))
    return LinearState(
        flavor=MAMBA2,
        conv_dim=inner,
        conv_kernel=_int(cfg, "conv_kernel", "mamba_d_conv", default=4),
        heads=heads,
        head_dims=(head_dim, state),
        n_groups=_int(cfg, "n_groups", "mamba_n_groups", default=1),
        state_size=state,
        ssm_dtype=ssm,
        chunk_size=_int(cfg, "mamba_chunk_size", "chunk_size"),
    )


def _mamba1(cfg: Mapping[str, Any], ssm: str | None) -> LinearState:
    """Jamba / Mamba-1: mamba1_state_shape (both states split over TP along the channels)."""
    inner = _int(cfg, "intermediate_size")
    if cfg.get("mamba_expand"):
        inner = int(float(cfg["mamba_expand"]) * _int(cfg, "hidden_size"))
    state = _int(cfg, "mamba_d_state", "state_size", default=16)
    return LinearState(
        flavor=MAMBA1,
        conv_dim=inner,
        conv_kernel=_int(cfg, "mamba_d_conv", "conv_kernel", default=4),
        heads=inner,
        head_dims=(1, state),
        ssm_dtype=ssm,
    )

"""``ModelSpec``: the architecture facts the memory model needs, read from a config.json dict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .quant import QuantSpec


@dataclass(frozen=True, slots=True)
class MoeSpec:
    """Mixture-of-experts layers (Mixtral, Qwen-MoE, DeepSeek)."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0  # all shared experts together (0: none)
    shared_expert_gate: bool = False  # Qwen-MoE's sigmoid gate on the shared expert
    router_bias: bool = False  # DeepSeek-V3 e_score_correction_bias


@dataclass(frozen=True, slots=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    @property
    def latent_size(self) -> int:
        """Width of the one cached latent per token and layer."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class SafetensorsSummary:
    """What safetensors headers say without downloading weights (per-dtype counts, names)."""

    parameter_counts: Mapping[str, int]  # safetensors dtype ("BF16", "I32", ...) -> elements
    vision_parameters: int = 0  # elements of vision tower / projector tensors
    total_bytes: int | None = None  # model.safetensors.index.json metadata.total_size


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder model as vLLM will build it; all sizes are totals before any sharding."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype: str  # checkpoint dtype: float32, float16 or bfloat16
    derived_max_model_len: int
    max_len_source: str  # e.g. "max_position_embeddings=2048" for vLLM's error text
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    lm_head_bias: bool = False
    norms_per_layer: int = 2
    norm_has_bias: bool = False
    qk_norm: bool = False
    rotary_dim: int = 0
    rope_cache_len: int = 0
    rope_caches: int = 1
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] = ()  # per layer: True when it uses the sliding window
    moe: MoeSpec | None = None
    moe_layers: tuple[bool, ...] = ()  # per layer: True when its MLP is the MoE block
    mla: MlaSpec | None = None
    quant: QuantSpec | None = None
    vision_parameters: int = 0
    architectures: tuple[str, ...] = ()

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        safetensors: SafetensorsSummary | None = None,
        name: str = "",
    ) -> ModelSpec:
        """Build from a config.json dict (and safetensors metadata when known)."""
        from .configread import spec_from_config

        return spec_from_config(config, safetensors=safetensors, name=name)

    def is_sliding(self, layer: int) -> bool:
        """Whether ``layer`` attends through a sliding window."""
        return bool(self.sliding_layers) and self.sliding_layers[layer]

    def is_moe(self, layer: int) -> bool:
        """Whether ``layer``'s MLP is the mixture-of-experts block."""
        return self.moe is not None and bool(self.moe_layers) and self.moe_layers[layer]

    @property
    def padded_vocab_size(self) -> int:
        """Vocab rows as vLLM's VocabParallelEmbedding allocates them (multiple of 64)."""
        return -(-self.vocab_size // 64) * 64

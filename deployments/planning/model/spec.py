"""``ModelSpec``: the architecture facts the memory model needs, read from a config.json dict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from deployments.planning.errors import ModelSpecError
from deployments.planning.units import canonical_dtype

from . import config_fields as cf
from . import quant as quant_mod
from .layers import LayerPlan, layer_plan
from .pooling import ENCODER_MODEL_TYPES, PoolingSpec, pooling_spec
from .quant import QuantSpec
from .vision import vision_embeds, vision_parameters


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
    vision_embeds: tuple[int, int] = (0, 0)  # (tokens of the largest image, embedding width)
    architectures: tuple[str, ...] = ()
    layer_plan: LayerPlan | None = None  # per-layer caches (None: from the flags above)
    # vLLM's pooling runner serves it (embeddings, classification): None for a generative model
    pooling: PoolingSpec | None = None
    # rows of hidden_size beside the vocabulary: an encoder's learned positions and token types
    extra_embedding_rows: int = 0

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        safetensors: SafetensorsSummary | None = None,
        name: str = "",
        st_modules: Sequence[Mapping[str, Any]] | None = None,
        st_pooling: Mapping[str, Any] | None = None,
        st_max_seq_length: int | None = None,
    ) -> ModelSpec:
        """Build from a config.json dict (and safetensors metadata when known); a
        sentence-transformers ``modules.json``, its pooling config and the ``max_seq_length`` of
        its sentence_bert_config.json when the folder has them (vLLM takes that length as the
        model's own: config/model.py:2636-2637)."""
        spec = spec_from_config(config, safetensors=safetensors, name=name)
        if st_max_seq_length and st_max_seq_length > 0:
            spec = replace(
                spec,
                derived_max_model_len=int(st_max_seq_length),
                max_len_source=f"max_seq_length={int(st_max_seq_length)}",
            )
        pooling = pooling_spec(
            spec.architectures, spec.model_type, st_modules=st_modules, st_pooling=st_pooling
        )
        return replace(spec, pooling=pooling) if pooling is not None else spec

    @property
    def encoder_only(self) -> bool:
        """Bidirectional attention served by the pooling runner: vLLM keeps no KV cache."""
        return self.pooling is not None and self.pooling.encoder_only

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


# --- reading config.json ----------------------------------------------------------------


# Far above any real model (the largest have ~130 layers, hidden 18k, vocab 260k, 10M tokens of
# context), low enough that a config claiming more cannot stall the per-layer work of a plan.
BOUNDS = {
    "num_hidden_layers": 10_000,
    "hidden_size": 1 << 20,
    "num_attention_heads": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "head_dim": 1 << 16,
    "intermediate_size": 1 << 24,
    "vocab_size": 1 << 24,
    "num_experts": 1 << 16,
    "moe_intermediate_size": 1 << 24,
}
NON_GATED = frozenset(
    {"phi", "gpt2", "gpt_neox", "falcon", "starcoder2", "gpt_bigcode", "opt", "bloom", "gptj"}
    | {"nemotron_h"}  # relu² up/down MLPs and experts
    | ENCODER_MODEL_TYPES  # BERT-style GELU up/down MLPs
)
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "opt", "falcon"})
FOUR_NORMS = frozenset({"gemma2", "gemma3", "gemma3_text"})
QK_NORM = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"})
QKV_BIAS = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
LAYERNORM_WITH_BIAS = frozenset(
    {"phi", "gpt2", "gpt_neox", "falcon", "starcoder2", "opt", "bloom"} | ENCODER_MODEL_TYPES
)


def spec_from_config(
    config: Mapping[str, Any], *, safetensors: SafetensorsSummary | None, name: str
) -> ModelSpec:
    """Build a ModelSpec; raises ModelSpecError naming the first missing or bad field."""
    if not isinstance(config, Mapping):
        raise ModelSpecError("config.json must hold a JSON object")
    text = cf.text_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    hidden = cf.int_field(text, "hidden_size", "n_embd", "d_model")
    heads = cf.int_field(text, "num_attention_heads", "n_head", "num_heads")
    max_len, source = cf.max_len(text)
    spec = _bounded(
        ModelSpec(
            name=name or str(config.get("_name_or_path", "")),
            model_type=model_type,
            hidden_size=hidden,
            num_layers=cf.int_field(text, "num_hidden_layers", "n_layer", "num_layers"),
            num_heads=heads,
            num_kv_heads=cf.kv_heads(text, heads),
            head_dim=cf.head_dim(text, hidden, heads),
            intermediate_size=_dense_intermediate(text, hidden),
            vocab_size=cf.int_field(text, "vocab_size", "padded_vocab_size"),
            dtype=_dtype(config, text, safetensors),
            derived_max_model_len=max_len,
            max_len_source=source,
            architectures=tuple(str(a) for a in config.get("architectures") or ()),
            **_flags(text, model_type, config),
        )
    )
    spec = _with_extras(spec, text, config, safetensors)
    if spec.moe is not None:
        _check("num_experts", spec.moe.num_experts)
        _check("moe_intermediate_size", spec.moe.expert_intermediate_size)
    return spec


def _bounded(spec: ModelSpec) -> ModelSpec:
    """Refuse absurd dimensions before anything loops over layers (per-layer flags, weights)."""
    _check("num_hidden_layers", spec.num_layers)
    _check("hidden_size", spec.hidden_size)
    _check("num_attention_heads", spec.num_heads)
    _check("num_key_value_heads", spec.num_kv_heads)
    _check("head_dim", spec.head_dim)
    _check("intermediate_size", spec.intermediate_size)
    _check("vocab_size", spec.vocab_size)
    return spec


def _check(field: str, value: int) -> None:
    if value > BOUNDS[field]:
        raise ModelSpecError(
            f"config.json field {field} is {value:,}, beyond any real model (at most "
            f"{BOUNDS[field]:,}): not a model that can be planned"
        )


def _with_extras(
    spec: ModelSpec,
    text: Mapping[str, Any],
    config: Mapping[str, Any],
    st: SafetensorsSummary | None,
) -> ModelSpec:
    moe, moe_layers = _moe(text, spec.num_layers)
    mla = _mla(text)
    qc = config.get("quantization_config") or text.get("quantization_config")
    extra_rows = _extra_embedding_rows(text, spec.model_type)
    vision = st.vision_parameters if st is not None else vision_parameters(config, spec.hidden_size)
    rotary = mla.qk_rope_head_dim if mla else cf.rotary_dim(text, spec.head_dim)
    sliding = cf.sliding(text, spec.model_type, spec.num_layers)
    plan = layer_plan(
        text,
        model_type=spec.model_type,
        num_layers=spec.num_layers,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        mla_latent=mla.latent_size if mla else 0,
        sliding=sliding["sliding_layers"],
        sliding_window=sliding["sliding_window"],
    )
    return replace(
        spec,
        moe=moe,
        moe_layers=moe_layers,
        mla=mla,
        quant=quant_mod.from_config(qc) if isinstance(qc, Mapping) else None,
        vision_parameters=vision,
        vision_embeds=vision_embeds(config, spec.hidden_size),
        rotary_dim=rotary,
        rope_cache_len=0 if _learned_positions(text, spec.model_type) else cf.rope_cache_len(text),
        rope_caches=2 if spec.model_type in ("gemma3", "gemma3_text") else 1,
        layer_plan=plan,
        extra_embedding_rows=extra_rows,
        **sliding,
    )


def _learned_positions(text: Mapping[str, Any], model_type: str) -> bool:
    """An encoder with absolute position embeddings (BERT, XLM-R), not rotary ones (Nomic)."""
    rotary = text.get("rotary_emb_base") or text.get("rope_theta")
    return model_type in ENCODER_MODEL_TYPES and not rotary


def _extra_embedding_rows(text: Mapping[str, Any], model_type: str) -> int:
    """BERT-style encoders learn absolute positions and token types beside the vocabulary."""
    if model_type not in ENCODER_MODEL_TYPES:
        return 0
    learned = _learned_positions(text, model_type)
    positions = int(text.get("max_position_embeddings") or 0) if learned else 0
    return positions + int(text.get("type_vocab_size") or 0)


def _dtype(
    config: Mapping[str, Any], text: Mapping[str, Any], st: SafetensorsSummary | None
) -> str:
    for cfg in (text, config):
        for key in ("torch_dtype", "dtype"):
            if isinstance(cfg.get(key), str):
                return canonical_dtype(cfg[key])
    if st is not None:
        floats = {k: v for k, v in st.parameter_counts.items() if k in ("F32", "F16", "BF16")}
        if floats:
            best = max(floats, key=lambda k: floats[k])
            return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[best]
    return "float32"


def _flags(text: Mapping[str, Any], model_type: str, config: Mapping[str, Any]) -> dict[str, Any]:
    attn_bias = bool(text.get("attention_bias", False)) or model_type in ENCODER_MODEL_TYPES
    phi = model_type == "phi" or model_type in ENCODER_MODEL_TYPES  # biases on every linear
    tie = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    return {
        "tie_word_embeddings": bool(model_type in TIED_BY_DEFAULT if tie is None else tie),
        "gated_mlp": model_type not in NON_GATED,
        "qkv_bias": attn_bias or phi or model_type in QKV_BIAS or bool(text.get("qkv_bias")),
        "o_bias": attn_bias or phi,
        "mlp_bias": bool(text.get("mlp_bias", False)) or phi,
        "lm_head_bias": phi and model_type not in ENCODER_MODEL_TYPES,
        "norms_per_layer": 4 if model_type in FOUR_NORMS else 1 if model_type == "phi" else 2,
        "norm_has_bias": model_type in LAYERNORM_WITH_BIAS,
        "qk_norm": model_type in QK_NORM or bool(text.get("qk_layernorm")),
    }


def _dense_intermediate(cfg: Mapping[str, Any], hidden: int) -> int:
    """The width of a dense layer's MLP. Llama 4's dense layers (Maverick's every other one)
    are an MLP of intermediate_size_mlp; its intermediate_size is the experts' (vLLM 0.33
    llama4.py:340-352). Scout has no dense layer, so its own width stands."""
    step = int(cfg.get("interleave_moe_layer_step") or 0)
    if cfg.get("intermediate_size_mlp") and step != 1:
        return int(cfg["intermediate_size_mlp"])
    return cf.intermediate(cfg, hidden)


def _moe(cfg: Mapping[str, Any], layers: int) -> tuple[MoeSpec | None, tuple[bool, ...]]:
    experts = cf.int_field(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=1)
    if experts <= 1:
        return None, ()
    inter = cf.int_field(cfg, "moe_intermediate_size", "intermediate_size")
    shared_inter = int(cfg.get("moe_shared_expert_intermediate_size") or inter)  # Nemotron-H
    shared = int(cfg.get("n_shared_experts") or 0) * shared_inter
    shared = shared or int(cfg.get("shared_expert_intermediate_size") or 0)
    if cfg.get("model_type") == "llama4_text":
        shared = inter  # llama4.py Llama4MoE: one shared expert of intermediate_size per MoE layer
    moe = MoeSpec(
        num_experts=experts,
        experts_per_token=cf.experts_per_token(cfg),
        expert_intermediate_size=inter,
        shared_intermediate_size=shared,
        shared_expert_gate=bool(cfg.get("shared_expert_intermediate_size")),
        router_bias=cfg.get("topk_method") == "noaux_tc",
    )
    return moe, tuple(_is_moe_layer(cfg, i) for i in range(layers))


def _is_moe_layer(cfg: Mapping[str, Any], i: int) -> bool:
    if "first_k_dense_replace" in cfg:
        return i >= int(cfg["first_k_dense_replace"]) and i % int(cfg.get("moe_layer_freq", 1)) == 0
    if i in (cfg.get("mlp_only_layers") or ()):
        return False
    if "interleave_moe_layer_step" in cfg:  # Llama 4 (Maverick: every other layer)
        step = int(cfg["interleave_moe_layer_step"])
        return step > 0 and (i + 1) % step == 0
    return (i + 1) % int(cfg.get("decoder_sparse_step", 1) or 1) == 0


def _mla(cfg: Mapping[str, Any]) -> MlaSpec | None:
    if cfg.get("kv_lora_rank") is None:
        return None
    return MlaSpec(
        kv_lora_rank=cf.int_field(cfg, "kv_lora_rank"),
        qk_rope_head_dim=cf.int_field(cfg, "qk_rope_head_dim"),
        qk_nope_head_dim=cf.int_field(cfg, "qk_nope_head_dim"),
        v_head_dim=cf.int_field(cfg, "v_head_dim"),
        q_lora_rank=int(cfg["q_lora_rank"]) if cfg.get("q_lora_rank") else None,
    )

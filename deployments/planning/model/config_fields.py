"""Reading single fields of a config.json: the names each model family uses for the same
dimension, their defaults, and the bounds on the context length. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deployments.planning.errors import ModelSpecError

TEXT_KEYS = ("text_config", "llm_config", "language_config")
MAX_CONTEXT_TOKENS = 1 << 28
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in TEXT_KEYS:
        nested = config.get(key)
        if isinstance(nested, Mapping) and nested:
            return nested
    return config


def int_field(cfg: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ModelSpecError(
                f"config.json field {key} must be a positive number, got {value!r}"
            )
        if value != int(value):
            raise ModelSpecError(f"config.json field {key} must be a whole number, got {value!r}")
        return int(value)
    if default is not None:
        return default
    raise ModelSpecError(f"config.json lacks {' / '.join(keys)}")


def kv_heads(cfg: Mapping[str, Any], heads: int) -> int:
    if cfg.get("multi_query") is True:
        return 1
    keys = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
    return int_field(cfg, *keys, default=heads)


def head_dim(cfg: Mapping[str, Any], hidden: int, heads: int) -> int:
    if cfg.get("head_dim") is not None:
        return int_field(cfg, "head_dim")
    if hidden % heads:
        raise ModelSpecError(
            f"hidden_size {hidden} is not a multiple of {heads} heads; set head_dim"
        )
    return hidden // heads


def intermediate(cfg: Mapping[str, Any], hidden: int) -> int:
    keys = ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
    return int_field(cfg, *keys, default=4 * hidden)


def experts_per_token(cfg: Mapping[str, Any]) -> int:
    # Gemma 4 (gemma4.py) names it top_k_experts; Hunyuan moe_topk
    keys = ("num_experts_per_tok", "top_k_experts", "moe_topk")
    return int_field(cfg, *keys, default=2)


def max_len(cfg: Mapping[str, Any]) -> tuple[int, str]:
    found = {k: cfg[k] for k in MAX_LEN_KEYS if isinstance(cfg.get(k), int | float)}
    if not found:
        return 2048, "default=2048"
    key = min(found, key=lambda k: found[k])
    length = float(found[key])
    rope = cfg.get("rope_scaling")
    if isinstance(rope, Mapping):
        kind = rope.get("rope_type", rope.get("type"))
        if kind not in ("su", "longrope", "llama3", "default", "mrope") and "factor" in rope:
            if "mrope_section" not in rope:
                if kind == "yarn":
                    length = float(rope.get("original_max_position_embeddings", length))
                length *= float(rope["factor"])
    if not length <= MAX_CONTEXT_TOKENS:  # also NaN and infinity
        raise ModelSpecError(
            f"config.json gives a context of {length:,.0f} tokens ({key}, rope_scaling), beyond "
            f"any real model (at most {MAX_CONTEXT_TOKENS:,})"
        )
    return int(length), f"{key}={float(found[key])}"


def rope_cache_len(cfg: Mapping[str, Any]) -> int:
    length = int(cfg.get("max_position_embeddings") or cfg.get("n_positions") or 2048)
    rope = cfg.get("rope_scaling")
    if not isinstance(rope, Mapping) or "factor" not in rope:
        return length
    kind = rope.get("rope_type", rope.get("type"))
    if kind in ("linear", "dynamic"):
        return int(length * float(rope["factor"]))
    if kind in ("yarn", "deepseek_yarn"):
        original = rope.get("original_max_position_embeddings", length)
        return int(float(original) * float(rope["factor"]))
    return length


def rotary_dim(cfg: Mapping[str, Any], head_dim: int) -> int:
    factor = cfg.get("partial_rotary_factor", cfg.get("rotary_pct", 1.0))
    return int(head_dim * float(factor))


def sliding(cfg: Mapping[str, Any], model_type: str, layers: int) -> dict[str, Any]:
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if not isinstance(window, int) or window <= 0 or cfg.get("use_sliding_window") is False:
        return {"sliding_window": None, "sliding_layers": ()}
    if isinstance(types, list) and len(types) == layers:
        flags = tuple(t == "sliding_attention" for t in types)
    elif model_type == "gemma2":
        flags = tuple(i % 2 == 0 for i in range(layers))
    elif model_type in ("gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern", 6))
        flags = tuple((i + 1) % pattern != 0 for i in range(layers))
    elif cfg.get("use_sliding_window") is True:
        first = int(cfg.get("max_window_layers", 0))
        flags = tuple(i >= first for i in range(layers))
    else:
        flags = (True,) * layers
    return {"sliding_window": window if any(flags) else None, "sliding_layers": flags}

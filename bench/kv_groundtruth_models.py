"""Shape-true tiny models for bench/kv_groundtruth.py: each is a real model's config.json (the
shared planner-cases configs and models, or a transformers config class's defaults) with every
layer kind in its real count and order and every per-layer KV and state shape kept (KV heads,
head dims, sliding window, global heads, linear-attention heads and dims, conv kernel, Mamba
heads, groups and state, KV LoRA rank and rope dims), and only what no cache depends on shrunk:
hidden size, FFN widths, vocabulary, experts (and, for MLA, the query heads and q LoRA rank,
which its one latent per token does not see). Pure: dicts in, dicts out, plus reading the JSON."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[2] / "shared" / "planner-cases"

HIDDEN = 256
FFN = 256
MOE_FFN = 128
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
VOCAB = 384  # the demo tokenizer's (deployments/catalog/demo_model.py)
MLA_HEADS = 8
Q_LORA = 64
# Only these widths may shrink; everything else of the real config stays as it was.
_SHRINK = {
    "hidden_size": HIDDEN,
    "intermediate_size": FFN,
    "intermediate_size_mlp": FFN,
    "moe_intermediate_size": MOE_FFN,
    "shared_expert_intermediate_size": MOE_FFN,
    "moe_shared_expert_intermediate_size": MOE_FFN,
    "vocab_size": VOCAB,
    "vocab_size_per_layer_input": VOCAB,
}
_EXPERT_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts")
_EXPERTS_PER_TOKEN = ("num_experts_per_tok", "experts_per_token", "top_k_experts")
_DROPPED = ("quantization_config", "auto_map", "_name_or_path")


@dataclass(frozen=True, slots=True)
class Shape:
    """One tiny model: where its config comes from, and what was kept besides the defaults."""

    name: str  # folder name under models/
    family: str  # the family
    source: str  # the real config it was made from
    kept: str  # the shape kept, in words (the calibration table's column)
    config: dict[str, Any] = field(default_factory=dict)


def _read(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SHARED / path).read_text(encoding="utf-8"))
    return data


def _text_only(cfg: dict[str, Any], architecture: str) -> dict[str, Any]:
    """A multimodal checkpoint's language model as its own text-only checkpoint."""
    text = copy.deepcopy(cfg["text_config"])
    text["architectures"] = [architecture]
    text.setdefault("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
    return text


def shrink(cfg: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The real config with only the cache-free widths shrunk (see the module's docstring)."""
    out = copy.deepcopy(cfg)
    for key in _DROPPED:
        out.pop(key, None)
    if "head_dim" not in out and "num_attention_heads" in out and "kv_lora_rank" not in out:
        # the real head width was derived from the hidden size: keep it explicitly
        out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
    for key, value in _SHRINK.items():
        if out.get(key):
            out[key] = min(out[key], value)
    for key in _EXPERT_COUNTS:
        if out.get(key):
            out[key] = EXPERTS
    for key in _EXPERTS_PER_TOKEN:
        if out.get(key):
            out[key] = EXPERTS_PER_TOKEN
    out["bos_token_id"], out["eos_token_id"], out["pad_token_id"] = 0, 0, 1
    out["torch_dtype"] = "bfloat16"  # what vLLM's CPU kernels need (GDN: "requires BF16")
    out.pop("dtype", None)
    out.update(extra)
    return out


def _mla(cfg: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """MLA caches one latent (kv_lora_rank + qk_rope_head_dim) per token, whatever the query
    heads: those and the q LoRA rank shrink; n_group/topk_group follow the 4 experts."""
    q_lora = Q_LORA if cfg.get("q_lora_rank") else None
    return shrink(
        cfg,
        num_attention_heads=MLA_HEADS,
        num_key_value_heads=MLA_HEADS,
        q_lora_rank=q_lora,
        n_group=1,
        topk_group=1,
        **extra,
    )


def _gemma3_defaults() -> dict[str, Any]:
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig().to_dict()
    cfg["architectures"] = ["Gemma3ForCausalLM"]
    for key in ("transformers_version", "id2label", "label2id"):
        cfg.pop(key, None)
    return cfg


def _moe_as_mlp(cfg: dict[str, Any]) -> dict[str, Any]:
    """Nemotron-H's MoE blocks ("E") as its dense MLP blocks ("-"): vLLM's fused MoE has no CPU
    kernel for relu2 experts, and neither block kind holds a cache, so every cache keeps its
    shape, count and place."""
    out = {k: v for k, v in cfg.items() if not k.startswith(("moe_", "n_routed", "n_shared"))}
    for key in ("num_experts_per_tok", "routed_scaling_factor", "n_group", "topk_group",
                "norm_topk_prob"):  # fmt: skip
        out.pop(key, None)
    out["hybrid_override_pattern"] = cfg["hybrid_override_pattern"].replace("E", "-")
    return out


def shapes() -> list[Shape]:
    """Every tiny model, by family."""
    models = "models/"
    configs = "configs/"
    nano = _read(f"{configs}nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json")
    qwen35 = _read(f"{configs}Qwen--Qwen3.5-27B_config.json")
    qwen35moe = _read(f"{configs}Qwen--Qwen3.5-35B-A3B_config.json")
    gemma4 = _read(f"{configs}google--gemma-4-26B-A4B_config.json")
    scout = _read(f"{configs}meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json")
    return [
        Shape(
            "llama-3.1-8b", "dense GQA", f"{models}meta-llama__Llama-3.1-8B-Instruct",
            "32 layers, 8 KV heads x 128",
            shrink(_read(f"{models}meta-llama__Llama-3.1-8B-Instruct/config.json")),
        ),
        Shape(
            "qwen3-14b", "dense GQA", f"{models}Qwen__Qwen3-14B",
            "40 layers, 8 KV heads x 128",
            shrink(_read(f"{models}Qwen__Qwen3-14B/config.json")),
        ),
        Shape(
            "gpt-oss-20b", "sliding/full (gpt-oss)", f"{configs}openai--gpt-oss-20b_config.json",
            "24 layers alternating sliding 128 / full, 8 KV heads x 64; MoE 32 -> 4 experts, bf16",
            shrink(_read(f"{configs}openai--gpt-oss-20b_config.json")),
        ),
        Shape(
            "gpt-oss-120b", "sliding/full (gpt-oss)",
            f"{configs}openai--gpt-oss-120b_config.json",
            "36 layers alternating sliding 128 / full, 8 KV heads x 64; MoE 128 -> 4, bf16",
            shrink(_read(f"{configs}openai--gpt-oss-120b_config.json")),
        ),
        Shape(
            "gemma-2-9b", "sliding/full (Gemma 2)", f"{models}google__gemma-2-9b-it",
            "42 layers alternating sliding 4096 / full, 8 KV heads x 256",
            shrink(_read(f"{models}google__gemma-2-9b-it/config.json")),
        ),
        Shape(
            "gemma-3-defaults", "local/global (Gemma 3/4)", "transformers Gemma3TextConfig()",
            "26 layers, 5 sliding (4096) : 1 global, 4 KV heads x 256",
            shrink(_gemma3_defaults()),
        ),
        Shape(
            "gemma-4-26b-a4b", "local/global (Gemma 3/4)",
            f"{configs}google--gemma-4-26B-A4B_config.json",
            "30 layers, 5 sliding (1024; 8 KV heads x 256) : 1 global (2 KV heads x 512, "
            "K = V); MoE 128 -> 4",
            shrink(_text_only(gemma4, "Gemma4ForCausalLM")),
        ),
        Shape(
            "deepseek-v3", "MLA", f"{configs}deepseek-ai--DeepSeek-V3_config.json",
            "61 MLA layers (latent 512 + rope 64), 3 dense then MoE 256 -> 4",
            _mla(_read(f"{configs}deepseek-ai--DeepSeek-V3_config.json")),
        ),
        Shape(
            "deepseek-v2-lite", "MLA", f"{models}deepseek-ai__DeepSeek-V2-Lite-Chat",
            "27 MLA layers (latent 512 + rope 64), no q LoRA; MoE 64 -> 4",
            _mla(_read(f"{models}deepseek-ai__DeepSeek-V2-Lite-Chat/config.json")),
        ),
        Shape(
            "deepseek-v3.2", "MLA", f"{configs}deepseek-ai--DeepSeek-V3.2_config.json",
            "61 sparse-MLA layers (latent 512 + rope 64, indexer 128 x 64 heads, top-k 2048)",
            _mla(_read(f"{configs}deepseek-ai--DeepSeek-V3.2_config.json")),
        ),
        Shape(
            "qwen3-next-80b-a3b", "Gated DeltaNet hybrid",
            f"{configs}Qwen--Qwen3-Next-80B-A3B-Thinking_config.json",
            "48 layers, 3 GDN : 1 full; GDN 16 K heads x 128, 32 V heads x 128, conv 4; "
            "attention 2 KV heads x 256; MoE 512 -> 4",
            shrink(_read(f"{configs}Qwen--Qwen3-Next-80B-A3B-Thinking_config.json")),
        ),
        Shape(
            "qwen3.5-27b", "Gated DeltaNet hybrid", f"{configs}Qwen--Qwen3.5-27B_config.json",
            "64 layers, 3 GDN : 1 full; GDN 16 K x 128, 48 V x 128, conv 4, SSM state float32; "
            "attention 4 KV heads x 256",
            shrink(_text_only(qwen35, "Qwen3_5ForCausalLM")),
        ),
        Shape(
            "qwen3.5-35b-a3b", "Gated DeltaNet hybrid",
            f"{configs}Qwen--Qwen3.5-35B-A3B_config.json",
            "40 layers, 3 GDN : 1 full; GDN 16 K x 128, 32 V x 128, conv 4, SSM float32; "
            "attention 2 KV heads x 256; MoE 256 -> 4",
            shrink(_text_only(qwen35moe, "Qwen3_5MoeForCausalLM")),
        ),
        Shape(
            "nemotron-3-nano-30b", "Mamba-2 hybrid",
            f"{configs}nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json",
            "52 layers (23 Mamba-2, 6 attention, 23 MoE) in the real pattern; Mamba 64 heads x "
            "64, 8 groups, state 128, conv 4, SSM float32; attention 2 KV heads x 128",
            shrink(nano),
        ),
        Shape(
            "nemotron-3-nano-30b-mlp", "Mamba-2 hybrid",
            f"{configs}nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json",
            "52 layers (23 Mamba-2, 6 attention in the real places; the 23 MoE blocks as dense "
            "relu2 MLP blocks, which hold no cache either); Mamba 64 heads x 64, 8 groups, "
            "state 128, conv 4, SSM float32; attention 2 KV heads x 128",
            _moe_as_mlp(shrink(nano)),
        ),
        Shape(
            "nemotron-h-56b", "Mamba-2 hybrid", f"{configs}nvidia--Nemotron-H-56B-Base-8K_config.json",
            "118 layers (54 Mamba-2, 10 attention, 54 MLP) in the real pattern; Mamba 256 heads "
            "x 64, 8 groups, state 256, conv 4; attention 8 KV heads x 128",
            shrink(_read(f"{configs}nvidia--Nemotron-H-56B-Base-8K_config.json")),
        ),
        Shape(
            "qwen3-235b-a22b", "MoE", f"{configs}nvidia--Qwen3-235B-A22B-NVFP4_config.json",
            "94 layers, 4 KV heads x 128; MoE 128 -> 4 experts (NVFP4 dropped: bf16)",
            shrink(_read(f"{configs}nvidia--Qwen3-235B-A22B-NVFP4_config.json")),
        ),
        Shape(
            "llama-4-scout", "MoE",
            f"{configs}meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json",
            "48 layers, chunked attention 8192 with every 4th layer global (NoPE), 8 KV heads "
            "x 128; MoE 16 -> 4 + shared expert",
            shrink(_text_only(scout, "Llama4ForCausalLM")),
        ),
    ]  # fmt: skip


def shape(name: str) -> Shape:
    for s in shapes():
        if s.name == name:
            return s
    raise KeyError(name)

"""Vision towers of multimodal checkpoints, estimated from ``vision_config`` the way vLLM's
model files build them (qwen2_5_vl.py, qwen3_vl.py; a generic ViT with a two-layer projector
for the others: LLaVA/Pixtral/InternVL/Mllama-style towers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def vision_parameters(config: Mapping[str, Any], text_hidden: int) -> int:
    """Parameters of the encoder and its projector; 0 when the config has no vision_config."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return 0
    if "out_hidden_size" in vc and "depth" in vc:
        return _qwen_vl(vc)
    if vc.get("model_type") == "gemma4_vision":
        return _gemma4(vc, text_hidden)
    if vc.get("model_type") == "llama4_vision_model":
        return _llama4(vc, text_hidden)
    return _generic_vit(vc, text_hidden)


# Towers vLLM builds with Transformers' AutoModel and plain (replicated) linears
# (models/gemma4_mm.py, transformers/utils.recursive_replace_linear): every TP rank holds all.
REPLICATED_TOWERS = frozenset({"Gemma4ForConditionalGeneration"})


def tower_split_by_tp(architectures: tuple[str, ...]) -> bool:
    """Whether the vision tower's linear layers are tensor-parallel (vLLM's own encoders)."""
    return not REPLICATED_TOWERS.intersection(architectures)


# Qwen2.5-VL's max_pixels 12845056 over 28×28 pixels per token, Qwen3-VL's longest_edge 16777216
# over 32×32: the processors' defaults (preprocessor_config.json), not in config.json
QWEN_VL_MAX_IMAGE_TOKENS = 16384


def vision_embeds(config: Mapping[str, Any], text_hidden: int) -> tuple[int, int]:
    """(embeddings of the largest image, width of each) that vLLM's profile run holds in its
    encoder cache; (0, 0) for a text-only model."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return 0, 0
    if config.get("vision_soft_tokens_per_image") or config.get("mm_tokens_per_image"):
        # Gemma 3/4: each image is pooled to a fixed number of soft tokens
        per_image = config.get("vision_soft_tokens_per_image") or config["mm_tokens_per_image"]
        return int(per_image), text_hidden
    if "out_hidden_size" in vc and "depth" in vc:
        stacks = 1 + len(vc.get("deepstack_visual_indexes") or ())  # Qwen3-VL's extra levels
        return QWEN_VL_MAX_IMAGE_TOKENS, int(vc["out_hidden_size"]) * stacks
    patch = int(vc.get("patch_size") or 14)
    side = int(vc.get("image_size") or 336) // max(patch, 1)
    return side * side, text_hidden


def _gemma4(vc: Mapping[str, Any], text_hidden: int) -> int:
    """Gemma 4: a 2-D position table, a linear patch projection, gated-MLP blocks with four
    norms and q/k norms, and embed_vision's projection to the text width."""
    hidden, inter = (
        int(vc["hidden_size"]),
        int(vc.get("intermediate_size") or 4 * vc["hidden_size"]),
    )
    layers, patch = int(vc.get("num_hidden_layers") or 0), int(vc.get("patch_size") or 16)
    head_dim = int(vc.get("head_dim") or hidden // int(vc.get("num_attention_heads") or 1))
    positions = 2 * int(vc.get("position_embedding_size") or 0) * hidden
    block = 4 * hidden * hidden + 3 * hidden * inter + 2 * head_dim + 4 * hidden
    return positions + 3 * patch * patch * hidden + layers * block + hidden * text_hidden


def _llama4(vc: Mapping[str, Any], text_hidden: int) -> int:
    """Llama 4 (models/mllama4.py): Llama4UnfoldConvolution's bias-free patch linear, a class
    embedding and (patches + 1) learned positions, pre/post LayerNorms; per layer biased QKV and
    o_proj, a biased GELU fc1/fc2 MLP and two LayerNorms; Llama4VisionPixelShuffleMLP
    (intermediate_size -> projector_input_dim -> projector_output_dim, bias per
    multi_modal_projector_bias) and Llama4MultiModalProjector (vision_output_dim -> text hidden,
    no bias)."""
    hidden, inter = (
        int(vc["hidden_size"]),
        int(vc.get("intermediate_size") or 4 * vc["hidden_size"]),
    )
    layers, patch = int(vc.get("num_hidden_layers") or 0), int(vc.get("patch_size") or 14)
    channels, image = int(vc.get("num_channels") or 3), int(vc.get("image_size") or 448)
    embed = channels * patch * patch * hidden + hidden + ((image // patch) ** 2 + 1) * hidden
    embed += 4 * hidden  # layernorm_pre, layernorm_post
    block = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + inter + hidden + 4 * hidden
    proj_in, proj_out = (
        int(vc.get("projector_input_dim") or 4096),
        int(vc.get("projector_output_dim") or 4096),
    )
    adapter = inter * proj_in + proj_in * proj_out
    if vc.get("multi_modal_projector_bias"):
        adapter += proj_in + proj_out
    projector = int(vc.get("vision_output_dim") or proj_out) * text_hidden
    return embed + layers * block + adapter + projector


def _qwen_vl(vc: Mapping[str, Any]) -> int:
    """Qwen2.5-VL / Qwen3-VL: Conv3d patch embed, ViT blocks, a 2×2 merger (and deepstack)."""
    hidden = int(vc.get("hidden_size") or vc.get("embed_dim") or 0)
    depth, out = int(vc["depth"]), int(vc["out_hidden_size"])
    inter = int(vc.get("intermediate_size") or 4 * hidden)
    if hidden <= 0 or depth <= 0:
        return 0
    patch, temporal = int(vc.get("patch_size") or 14), int(vc.get("temporal_patch_size") or 2)
    channels = int(vc.get("in_channels") or vc.get("in_chans") or 3)
    merge = int(vc.get("spatial_merge_size") or 2) ** 2 * hidden
    embed = channels * temporal * patch * patch * hidden + hidden
    embed += int(vc.get("num_position_embeddings") or 0) * hidden  # Qwen3-VL learned positions
    gated = "fullatt_block_indexes" in vc  # Qwen2.5-VL: SwiGLU MLP; Qwen3-VL: two-layer GELU
    mlp = (3 if gated else 2) * hidden * inter + (2 * inter if gated else inter) + hidden
    block = 4 * hidden * hidden + 4 * hidden + mlp + 4 * hidden  # qkv+proj (biased), two norms
    merger = merge * merge + merge + merge * out + out + 2 * merge
    mergers = 1 + len(vc.get("deepstack_visual_indexes") or ())
    return embed + depth * block + mergers * merger


def _generic_vit(vc: Mapping[str, Any], text_hidden: int) -> int:
    """ViT encoder plus a two-layer projector."""
    hidden = int(vc.get("hidden_size") or vc.get("embed_dim") or vc.get("width") or 0)
    if "embed_dim" in vc and "hidden_size" in vc:  # Qwen2-VL: hidden_size is the merger output
        hidden = int(vc["embed_dim"])
    layers = int(vc.get("num_hidden_layers") or vc.get("depth") or vc.get("layers") or 0)
    layers += int(vc.get("num_global_layers") or 0)  # Mllama's gated global encoder
    if hidden <= 0 or layers <= 0:
        return 0
    inter = int(vc.get("intermediate_size") or float(vc.get("mlp_ratio", 4.0)) * hidden)
    patch = int(vc.get("patch_size") or 14)
    channels = int(vc.get("num_channels") or vc.get("in_chans") or vc.get("in_channels") or 3)
    positions = (int(vc.get("image_size") or 336) // patch) ** 2 + 1
    per_layer = 4 * hidden * hidden + 2 * hidden * inter + 9 * hidden + inter
    embed = channels * patch * patch * hidden + positions * hidden
    projector = hidden * text_hidden + text_hidden * text_hidden + 2 * text_hidden
    return layers * per_layer + embed + projector

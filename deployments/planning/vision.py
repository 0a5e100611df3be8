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
    return _generic_vit(vc, text_hidden)


# Qwen2.5-VL's max_pixels 12845056 over 28×28 pixels per token, Qwen3-VL's longest_edge 16777216
# over 32×32: the processors' defaults (preprocessor_config.json), not in config.json
QWEN_VL_MAX_IMAGE_TOKENS = 16384


def vision_embeds(config: Mapping[str, Any], text_hidden: int) -> tuple[int, int]:
    """(embeddings of the largest image, width of each) that vLLM's profile run holds in its
    encoder cache; (0, 0) for a text-only model."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return 0, 0
    if "out_hidden_size" in vc and "depth" in vc:
        stacks = 1 + len(vc.get("deepstack_visual_indexes") or ())  # Qwen3-VL's extra levels
        return QWEN_VL_MAX_IMAGE_TOKENS, int(vc["out_hidden_size"]) * stacks
    patch = int(vc.get("patch_size") or 14)
    side = int(vc.get("image_size") or 336) // max(patch, 1)
    return side * side, text_hidden


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

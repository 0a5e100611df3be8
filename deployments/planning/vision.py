"""Vision towers of multimodal checkpoints, estimated from ``vision_config``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def vision_parameters(config: Mapping[str, Any], text_hidden: int) -> int:
    """ViT encoder plus a two-layer projector; 0 when the config has no vision_config."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return 0
    hidden = int(vc.get("hidden_size") or vc.get("embed_dim") or vc.get("width") or 0)
    if "embed_dim" in vc and "hidden_size" in vc:  # Qwen2-VL: hidden_size is the merger output
        hidden = int(vc["embed_dim"])
    layers = int(vc.get("num_hidden_layers") or vc.get("depth") or vc.get("layers") or 0)
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

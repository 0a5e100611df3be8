"""A tiny LoRA adapter for the demo model, written as PEFT writes one (adapter_config.json and
adapter_model.safetensors), without PEFT: random rank-r q_proj/v_proj factors on the demo
model's shapes, so that vLLM loads it at run time and its answers differ from the base's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

# The demo model's shapes (demo_model._build_model): hidden 128, 2 heads of 64, 1 KV head.
HIDDEN = 128
LAYERS = 2
OUT_FEATURES = {"q_proj": 128, "k_proj": 64, "v_proj": 64, "o_proj": 128}
IN_FEATURES = {"q_proj": HIDDEN, "k_proj": HIDDEN, "v_proj": HIDDEN, "o_proj": 128}
CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


def make_demo_adapter(
    path: Path,
    *,
    base_model: str = "shardboard-demo-tiny-llama",
    rank: int = 8,
    alpha: int = 16,
    modules: Sequence[str] = ("q_proj", "v_proj"),
    seed: int = 7,
    out_features: dict[str, int] | None = None,
) -> Path:
    """Write the adapter into `path` (made if missing); `out_features` overrides a module's
    output width (an adapter for another model's shapes, as tests need)."""
    import numpy as np
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    widths = {**OUT_FEATURES, **(out_features or {})}
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(LAYERS):
        for module in modules:
            stem = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            a = rng.standard_normal((rank, IN_FEATURES[module])).astype(np.float32) * 0.1
            b = rng.standard_normal((widths[module], rank)).astype(np.float32) * 0.5
            tensors[f"{stem}.lora_A.weight"] = a
            tensors[f"{stem}.lora_B.weight"] = b
    save_file(tensors, str(path / WEIGHTS), metadata={"format": "pt"})
    config = {
        "base_model_name_or_path": base_model,
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": list(modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (path / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return path

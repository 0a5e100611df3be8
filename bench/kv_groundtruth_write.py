"""Write one tiny model for bench/kv_groundtruth.py: run by vLLM's own Python (its transformers
reads the config as vLLM will), never Shardboard's.

    <vllm python> bench/kv_groundtruth_write.py OUT_DIR   (OUT_DIR/config.json already written)

Random weights from transformers' own model class in bfloat16, saved as safetensors beside the
config (which is kept as written: the planner and vLLM read the same file), and the demo
model's tokenizer (deployments/catalog/demo_model.py)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEED = 38


def write(out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from deployments.catalog.demo_model import _train_tokenizer

    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        for f in Path(tmp).iterdir():
            if f.suffix == ".safetensors" or f.name.endswith(".safetensors.index.json"):
                shutil.move(str(f), out / f.name)
    _train_tokenizer().save_pretrained(out)


if __name__ == "__main__":
    write(Path(sys.argv[1]))

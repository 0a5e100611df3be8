import json
import os
from pathlib import Path

import pytest

CASES = Path(
    os.environ.get("PLANNER_CASES_DIR")
    or Path(__file__).resolve().parents[2].parent / "shared" / "planner-cases"
)

LLAMA_70B = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "torch_dtype": "float16",
    "tie_word_embeddings": False,
}
LLAMA_8B = {
    **LLAMA_70B,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "torch_dtype": "bfloat16",
}


def case_config(name: str) -> dict:
    path = CASES / "models" / name / "config.json"
    if not path.exists():
        pytest.skip(f"planner cases not found at {CASES}")
    return json.loads(path.read_text())


FIXTURE_CONFIGS = Path(__file__).resolve().parents[1] / "deployments" / "planning" / "fixtures"


def fixture_config(name: str) -> dict:
    """config.json of a real model, copied into the tests' fixtures (planner-cases/configs)."""
    return json.loads((FIXTURE_CONFIGS / "configs" / f"{name}.json").read_text())

"""An adapter against a model, from its config and header alone: what vLLM would refuse, with
the mismatch named, before any engine sees it."""

from typing import Any

import pytest

from deployments import planning
from deployments.planning import AdapterTensor, adapter_problems, adapter_spec
from tests.deployments.planning.test_lora import DEMO

CONFIG = {
    "base_model_name_or_path": "org/shardboard-demo-tiny-llama",
    "peft_type": "LORA",
    "r": 8,
    "lora_alpha": 16,
    "target_modules": ["q_proj", "v_proj"],
    "bias": "none",
}


def tensors(rank: int = 8, q_out: int = 128, layers: int = 2) -> list[AdapterTensor]:
    out = []
    for i in range(layers):
        stem = f"base_model.model.model.layers.{i}.self_attn"
        out += [
            AdapterTensor(f"{stem}.q_proj.lora_A.weight", (rank, 128)),
            AdapterTensor(f"{stem}.q_proj.lora_B.weight", (q_out, rank)),
            AdapterTensor(f"{stem}.v_proj.lora_A.weight", (rank, 128)),
            AdapterTensor(f"{stem}.v_proj.lora_B.weight", (64, rank)),
        ]
    return out


def problems(config: dict[str, Any] | None = None, ts: list[AdapterTensor] | None = None,
             *, max_rank: int = 8, served: str = "shardboard-demo-tiny-llama") -> list[str]:  # fmt: skip
    adapter = adapter_spec(config or CONFIG, ts if ts is not None else tensors(), 29_696)
    spec = planning.ModelSpec.from_config(DEMO)
    return adapter_problems(adapter, spec, max_lora_rank=max_rank, served_model=served)


def test_the_demo_adapter_fits_the_demo_model() -> None:
    assert problems() == []
    adapter = adapter_spec(CONFIG, tensors(), 29_696)
    assert (adapter.rank, adapter.alpha, adapter.modules) == (8, 16.0, ("q_proj", "v_proj"))


def test_a_rank_over_the_deployments_max_is_named() -> None:
    found = problems(max_rank=1)
    assert found == [
        "its rank 8 is over this deployment's max_lora_rank 1 (LoRA rank is greater than "
        "max_lora_rank; launch with a larger --max-lora-rank)"
    ]


def test_rank_pattern_counts_toward_the_rank() -> None:
    adapter = adapter_spec({**CONFIG, "rank_pattern": {"v_proj": 32}}, tensors(), 1)
    assert adapter.rank == 32


def test_another_base_model_is_named() -> None:
    found = problems({**CONFIG, "base_model_name_or_path": "meta-llama/Llama-3.1-8B"})
    assert found == [
        "it was trained on 'meta-llama/Llama-3.1-8B', not on this deployment's model "
        "'shardboard-demo-tiny-llama'"
    ]


def test_a_local_copy_of_the_base_matches_by_name() -> None:
    assert problems(served="0/models/Shardboard-Demo-Tiny-Llama") == []


def test_a_shape_mismatch_names_the_module_and_the_sizes() -> None:
    found = problems({**CONFIG, "base_model_name_or_path": ""}, tensors(q_out=256))
    assert found == [
        "q_proj: the adapter's lora_B is 256 × 8, but the model's q_proj has 128 outputs"
    ]


def test_a_module_the_model_lacks_is_named() -> None:
    extra = [AdapterTensor("base_model.model.model.layers.0.mlp.fc9.lora_A.weight", (8, 128))]
    found = problems(ts=tensors() + extra)
    assert len(found) == 1 and found[0].startswith("target module 'fc9' is not a module of")


def test_a_layer_past_the_models_is_named() -> None:
    found = problems(ts=tensors(layers=3))
    assert found == ["q_proj of layer 2: the model has 2 layers (0 to 1)"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"use_dora": True}, "vLLM does not yet support DoRA."),
        ({"bias": "all"}, "Adapter bias is not supported."),
        ({"modules_to_save": ["lm_head"]}, "vLLM only supports modules_to_save"),
    ],
)
def test_peft_features_vllm_refuses_are_named_in_its_words(
    extra: dict[str, Any], words: str
) -> None:
    assert any(p.startswith(words) for p in problems({**CONFIG, **extra}))


@pytest.mark.parametrize(
    ("config", "ts", "message"),
    [
        ({**CONFIG, "peft_type": "IA3"}, tensors(), "vLLM serves LoRA adapters only"),
        ({k: v for k, v in CONFIG.items() if k != "r"}, tensors(), "has no rank 'r'"),
        ({**CONFIG, "r": 0}, tensors(), "must be a positive integer"),
        (CONFIG, [], "holds no tensors"),
        (CONFIG, [AdapterTensor("model.layers.0.q_proj.weight", (8, 8))], "not a LoRA factor"),
    ],
)
def test_what_is_not_a_lora_adapter_is_refused(
    config: dict[str, Any], ts: list[AdapterTensor], message: str
) -> None:
    with pytest.raises(planning.AdapterError, match=message):
        adapter_spec(config, ts, 0)

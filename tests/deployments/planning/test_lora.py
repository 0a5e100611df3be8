"""LoRA slots in the plan: the bytes vLLM allocates at start, measured on vLLM 0.32 (CPU build)
by summing the lora_a_stacked/lora_b_stacked tensors of every wrapped module
(docs/performance.md, "LoRA slots")."""

import re
from typing import Any

import pytest

from deployments import planning
from deployments.catalog.demo_model import demo_config
from deployments.planning.memory.lora import LoraConfig, lora_bytes

DEMO = demo_config()
MID = {**DEMO, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 3}
MID |= {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
MOE = {**DEMO, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral"}
MOE |= {"num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": False}


def spec(config: dict[str, Any]) -> planning.ModelSpec:
    return planning.ModelSpec.from_config(config)


def slots(config: dict[str, Any], rank: int, loras: int, *, tp: int = 1) -> int:
    s = spec(config)
    lora = LoraConfig(max_loras=loras, max_lora_rank=rank)
    layers = range(s.num_layers)
    return lora_bytes(s, lora, dtype_bytes=2, tp=tp, layers=layers, first=True, last=True)


@pytest.mark.parametrize(
    ("config", "rank", "loras", "tp", "measured"),
    [
        # vLLM 0.32, bfloat16 (dtype auto on this CPU), per rank
        (DEMO, 8, 2, 1, 163_840),
        (MID, 16, 3, 1, 1_302_528),
        (MID, 8, 2, 2, 323_584),  # each of the two ranks
        (MOE, 8, 1, 1, 196_736),
    ],
)
def test_lora_bytes_equal_what_vllm_allocated(
    config: dict[str, Any], rank: int, loras: int, tp: int, measured: int
) -> None:
    assert slots(config, rank, loras, tp=tp) == measured


def test_bytes_grow_with_slots_and_rank() -> None:
    one = slots(DEMO, 8, 1)
    assert slots(DEMO, 8, 4) == 4 * one
    assert slots(DEMO, 16, 1) == 2 * one


def test_pipeline_stages_split_layers_embedding_and_head() -> None:
    s = spec(MID)
    lora = LoraConfig(max_loras=1, max_lora_rank=8)
    whole = lora_bytes(s, lora, dtype_bytes=2, tp=1, layers=range(3), first=True, last=True)
    stage0 = lora_bytes(s, lora, dtype_bytes=2, tp=1, layers=range(2), first=True, last=False)
    stage1 = lora_bytes(s, lora, dtype_bytes=2, tp=1, layers=range(2, 3), first=False, last=True)
    assert stage0 + stage1 == whole
    assert stage0 > stage1


def test_the_plan_takes_lora_from_the_kv_cache() -> None:
    s = spec(DEMO)
    inv = planning.parse_gpus("1x24GiB")
    plain = planning.plan(s, inv, planning.PlanRequest(dtype="bfloat16")).plans[0]
    with_lora = planning.plan(
        s,
        inv,
        planning.PlanRequest(dtype="bfloat16", enable_lora=True, max_loras=2, max_lora_rank=8),
    ).plans[0]
    mem, base = with_lora.per_gpu[0], plain.per_gpu[0]
    assert mem.lora_bytes == 163_840 and base.lora_bytes == 0
    assert mem.kv_cache_bytes == base.kv_cache_bytes - 163_840
    assert mem.total_bytes == base.total_bytes  # the budget is the same; KV gives way
    settings = with_lora.engine_settings
    assert (settings.enable_lora, settings.max_loras, settings.max_lora_rank) == (True, 2, 8)
    assert planning.plan_details(with_lora)["per_gpu"][0]["lora_bytes"] == 163_840


def test_enabled_lora_takes_vllms_defaults() -> None:
    request = planning.PlanRequest(enable_lora=True)
    assert request.lora == LoraConfig(max_loras=1, max_lora_rank=16, max_cpu_loras=None)
    assert planning.PlanRequest().lora is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"enable_lora": True, "max_lora_rank": 12}, "max_lora_rank must be one of 1, 8, 16"),
        ({"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, "max_cpu_loras (2) must be >="),
        ({"max_loras": 2}, "need enable_lora"),
    ],
)
def test_settings_vllm_refuses_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(planning.PlanningError, match=re.escape(message)):
        planning.PlanRequest(**fields).validate()


def test_a_model_whose_attention_is_not_modelled_says_so() -> None:
    mla = {**DEMO, "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32}
    mla["v_head_dim"] = 32
    result = planning.plan(
        spec(mla), planning.parse_gpus("1x24GiB"), planning.PlanRequest(enable_lora=True)
    )
    assert any("LoRA memory is estimated" in w for w in result.plans[0].warnings)

"""vLLM's own errors, reproduced before launch."""

import pytest

from deployments.planning import ModelSpec, PlanRequest, estimate_layout
from tests.support.planning import LLAMA_8B, LLAMA_70B, case_config

GIB = 2**30


def reasons(config: dict, *, tp: int = 1, pp: int = 1, gib: float = 80, **req) -> tuple:
    spec = ModelSpec.from_config(config)
    layout = estimate_layout(spec, PlanRequest(**req), tp=tp, pp=pp, gpu_total_bytes=int(gib * GIB))
    return layout.reasons


def test_heads_not_divisible():
    assert reasons(LLAMA_8B, tp=3) == (
        "Total number of attention heads (32) must be divisible by tensor parallel size (3).",
    )


def test_vocab_not_divisible_qwen3_tp5():
    got = reasons(case_config("Qwen__Qwen3-14B"), tp=5)
    assert got == ("AssertionError: 151936 is not divisible by 5",)


def test_phi2_context_above_limit():
    (msg,) = reasons(case_config("microsoft__phi-2"), max_model_len=8192)
    assert msg.startswith("User-specified max_model_len (8192) is greater than the derived")
    assert "max_position_embeddings=2048.0" in msg


def test_no_memory_for_kv():
    (msg,) = reasons(LLAMA_70B, gib=80, max_model_len=4096)
    assert msg.startswith("No available memory for the cache blocks.")


def test_kv_smaller_than_one_request_says_what_fits():
    long_llama = {**LLAMA_8B, "max_position_embeddings": 131072}
    (msg,) = reasons(long_llama, gib=24, max_model_len=131072, gpu_memory_utilization=0.9)
    assert "estimated maximum model length is" in msg


def test_default_context_is_clipped_with_a_warning():
    spec = ModelSpec.from_config({**LLAMA_8B, "max_position_embeddings": 131072})
    layout = estimate_layout(spec, PlanRequest(), tp=1, pp=1, gpu_total_bytes=24 * GIB)
    assert layout.fits
    assert layout.max_model_len < 131072
    assert any("context clipped" in w for w in layout.warnings)


@pytest.mark.parametrize(
    "bad",
    [
        {"tensor_parallel_size": 0},
        {"gpu_memory_utilization": 1.5},
        {"kv_cache_dtype": "fp3"},
        {"vllm_version": "banana"},
    ],
)
def test_nonsense_numbers_raise(bad):
    from deployments.planning import PlanningError

    with pytest.raises(PlanningError):
        PlanRequest(**bad).validate()

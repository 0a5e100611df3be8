"""Hypothesis properties: memory never shrinks with more context or sequences; fitting plans fit."""

from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.planning import ModelSpec, PlanRequest, estimate_layout, parse_gpus, plan
from deployments.planning.memory.kvcache import stage_kv
from tests.support.planning import LLAMA_8B, LLAMA_70B

GIB = 2**30
SPECS = [ModelSpec.from_config(LLAMA_8B), ModelSpec.from_config(LLAMA_70B)]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SPECS), st.integers(1, 4096), st.integers(1, 4096))
def test_non_kv_memory_grows_with_sequences(spec, seqs_a, seqs_b):
    lo, hi = sorted((seqs_a, seqs_b))

    def used(seqs: int) -> int:
        layout = estimate_layout(
            spec,
            PlanRequest(max_num_seqs=seqs, max_model_len=4096, max_num_batched_tokens=8192),
            tp=1,
            pp=1,
            gpu_total_bytes=192 * GIB,
        )
        g = layout.per_gpu[0]
        return g.weights_bytes + g.activation_bytes + g.non_torch_bytes + g.cuda_graph_bytes

    assert used(lo) <= used(hi)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SPECS), st.integers(1, 8192), st.integers(1, 8192), st.sampled_from([1, 2]))
def test_kv_needed_grows_with_context(spec, len_a, len_b, element_bytes):
    lo, hi = sorted((len_a, len_b))
    kv = stage_kv(spec, tp=1, pp=1, pp_rank=0, block_size=16, element_bytes=element_bytes)
    assert kv.request_bytes(lo, 8192) <= kv.request_bytes(hi, 8192)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(SPECS),
    st.integers(1, 8),
    st.sampled_from([24, 40, 48, 80, 141]),
    st.sampled_from(["nvlink", "pcie"]),
    st.floats(0.5, 0.98),
    st.sampled_from([None, 2048, 32768]),
)
def test_every_fitting_plan_fits(spec, count, size, link, gmu, max_len):
    inventory = parse_gpus(f"{count}x{size}GiB@{link}")
    req = PlanRequest(gpu_memory_utilization=gmu, max_model_len=max_len, vllm_version="0.33.0")
    for p in plan(spec, inventory, req).plans:
        if not p.fits:
            assert p.reasons
            continue
        assert p.replicas * p.gpus_per_replica <= count
        assert p.kv_cache_tokens >= p.max_model_len
        for g in p.per_gpu:
            assert g.kv_cache_bytes > 0
            assert g.total_bytes <= g.budget_bytes <= g.gpu_total_bytes

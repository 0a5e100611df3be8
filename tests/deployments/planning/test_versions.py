"""Per-version defaults of vLLM's start-up accounting, as read from each release's sources."""

import pytest

from deployments.planning.memory.versions import default_batching, profile_for
from deployments.planning.units import GIB

B200, H100 = round(178.36 * GIB), round(79.19 * GIB)


@pytest.mark.parametrize(
    ("version", "gmu", "graphs_in_budget", "tokens_from_concurrency", "b200_batching"),
    [
        ("0.10.1", 0.9, False, False, (8192, 1024)),
        ("0.19.0", 0.9, False, False, (8192, 1024)),
        # config/cache.py 0.92 and envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "1" in 0.20
        ("0.20.0", 0.92, True, False, (8192, 1024)),
        ("0.21.0", 0.92, True, True, (8192, 1024)),
        ("0.27.0", 0.92, True, True, (8192, 1024)),
        # engine/arg_utils.py: GPUs of 160 GiB or more get 16384 batched tokens from 0.28
        ("0.28.0", 0.92, True, True, (16384, 1024)),
        ("0.33.0", 0.92, True, True, (16384, 1024)),
    ],
)
def test_defaults_of_each_version(
    version, gmu, graphs_in_budget, tokens_from_concurrency, b200_batching
):
    p = profile_for(version)
    assert p.default_gpu_memory_utilization == gmu
    assert p.cuda_graphs_in_budget is graphs_in_budget
    assert p.hybrid_tokens_from_concurrency is tokens_from_concurrency
    assert default_batching(p, B200, "NVIDIA B200") == b200_batching
    assert default_batching(p, H100, "NVIDIA H100 80GB HBM3") == (8192, 1024)
    assert default_batching(p, 24 * GIB, "NVIDIA L4") == (2048, 256)

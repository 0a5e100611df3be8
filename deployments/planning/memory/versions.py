"""What changes with the target vLLM version: defaults, profiling overheads, graph accounting."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.errors import PlanningError
from deployments.planning.units import GIB, MIB

DEFAULT_VLLM_VERSION = "0.33.0"


@dataclass(frozen=True, slots=True)
class VersionProfile:
    """Version-dependent facts of vLLM's start-up memory accounting."""

    version: tuple[int, int, int]
    default_gpu_memory_utilization: float
    cuda_graphs_in_budget: bool  # >= 0.20: graph memory estimated and taken from the KV budget
    hybrid_tokens_from_concurrency: bool  # >= 0.21 print int(concurrency × max_model_len)
    blackwell_tier: bool  # >= 0.28: 16384 batched tokens on GPUs of >= 160 GiB
    base_non_torch_bytes: int  # CUDA/cuBLAS/kernel images that appear during profiling, TP=1
    sampler_extra_bytes_per_logit: int  # fp32 copies the sampler warm-up holds per logit

    @property
    def label(self) -> str:
        """Dotted version string."""
        return ".".join(str(p) for p in self.version)


def parse_version(text: str) -> tuple[int, int, int]:
    """ "0.19.0" -> (0, 19, 0); "0.19" and "v0.19.1rc2" are accepted."""
    core = text.strip().lstrip("v").split("+")[0]
    parts = core.split(".")
    try:
        nums = [int("".join(ch for ch in p if ch.isdigit()) or "x") for p in parts[:3]]
    except ValueError:
        raise PlanningError(f"unreadable vLLM version {text!r} (expected e.g. 0.33.0)") from None
    if not nums or len(parts) < 2:
        raise PlanningError(f"unreadable vLLM version {text!r} (expected e.g. 0.33.0)")
    nums += [0] * (3 - len(nums))
    return nums[0], nums[1], nums[2]


# Where each default changed, read from the wheels' sources (docs/planner-calibration.md):
# config/cache.py gpu_memory_utilization 0.9 -> 0.92 and envs.py
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "0" -> "1" in 0.20; kv_cache_utils.py prints
# int(max_concurrency × max_model_len) from 0.21; engine/arg_utils.py's ">= 160 GiB" tier in 0.28.
DEFAULTS_092_FROM = (0, 20, 0)
TOKENS_FROM_CONCURRENCY_FROM = (0, 21, 0)
BLACKWELL_TIER_FROM = (0, 28, 0)


def profile_for(text: str = DEFAULT_VLLM_VERSION) -> VersionProfile:
    """The accounting rules of vLLM ``text``."""
    v = parse_version(text)
    if v < (0, 10, 0):
        raise PlanningError(f"vLLM {text} predates the V1 engine; plan for 0.10.0 or later")
    return VersionProfile(
        version=v,
        default_gpu_memory_utilization=0.92 if v >= DEFAULTS_092_FROM else 0.9,
        cuda_graphs_in_budget=v >= DEFAULTS_092_FROM,
        hybrid_tokens_from_concurrency=v >= TOKENS_FROM_CONCURRENCY_FROM,
        blackwell_tier=v >= BLACKWELL_TIER_FROM,
        base_non_torch_bytes=320 * MIB if v >= (0, 18, 0) else 190 * MIB,
        sampler_extra_bytes_per_logit=12,
    )


def default_batching(
    profile: VersionProfile, gpu_total_bytes: int, gpu_name: str
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` picks for this GPU."""
    if profile.blackwell_tier and gpu_total_bytes >= 160 * GIB:
        return 16384, 1024
    if gpu_total_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256

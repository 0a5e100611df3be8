"""What a platform sets before vLLM sizes the KV cache, apart from how it does so.

vLLM's KV sizing is one code path on every platform (v1/core/kv_cache_utils.py and
v1/kv_cache_interface.py in 0.32; kv_cache_planning.py from 0.33; memory/kvgroups.py and
layout.py here): per-layer page sizes, Mamba pages padded to the attention page
(platforms/interface.py ``_align_hybrid_block_size``, in the Platform base class), the KV-cache
groups, the block-size LCM, tokens and concurrency from the bytes each rank has. A platform sets
only the inputs: its default block size, its attention backend's smallest kernel block, the
dtypes it runs, its batching defaults, whether it schedules asynchronously, and its own kernels'
constraints. ``Platform`` holds those; ``gpu_platform`` is vLLM on CUDA, and
``cpu_platform.platform`` its CPU build, so a start of the CPU build checks the sizing a GPU
plan runs (tests/deployments/planning/test_cpu_cases.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.model.quant import gpu_generation
from deployments.planning.units import canonical_dtype

from .kvgroups import is_hopper
from .versions import VersionProfile, default_batching

GPU_BLOCK_SIZE = 16  # config/cache.py: CacheConfig.block_size when not given (CUDA)
# FlashAttention's get_supported_kernel_block_sizes: MultipleOf(16) (FlashInfer: 16, 32, 64)
GPU_KERNEL_BLOCK = 16
GPU_DTYPES = ("float16", "bfloat16", "float32")  # a float32 checkpoint runs in float16


@dataclass(frozen=True, slots=True)
class Platform:
    """The inputs a platform gives vLLM's shared KV sizing."""

    device: str  # "gpu" (CUDA) or "cpu" (vLLM's CPU build)
    name: str  # the GPU's name ("" when known only by its size) or the CPU's
    total_bytes: int  # the device's memory (a GPU) or the host's RAM
    block_size: int  # --block-size when not given
    kernel_block: int  # the attention backend's smallest kernel block (MultipleOf(n))
    dtypes: tuple[str, ...]  # the dtypes it runs; a float32 checkpoint gets the first
    batching: tuple[int, int]  # (max_num_batched_tokens, max_num_seqs) of vllm serve
    async_scheduling: bool = True  # two batches in flight (scheduler_config.async_scheduling)
    gdn_checkpoints: bool = False  # FlashInfer's Gated DeltaNet prefill (Hopper, from 0.33)
    mla_block_size: int | None = None  # a block size its MLA kernel forces
    mla_chunked_prefill: bool = True  # False: MLA runs without chunked prefill, prefix caching
    moe_generation: str = ""  # quant.gpu_generation: the MXFP4 expert padding of its kernels
    forced_ssm_bytes: int = 0  # an SSM state dtype it forces on hybrid models (bytes)

    def model_dtype(self, checkpoint: str, requested: str, *, pooling: bool) -> str:
        """The dtype vLLM runs the model in (config/model.py ``_resolve_auto_dtype``)."""
        if requested.lower() != "auto":
            return canonical_dtype(requested)
        preferred = "float16" if pooling and "float16" in self.dtypes else self.dtypes[0]
        dtype = canonical_dtype(checkpoint)
        if dtype == "float32":
            return preferred
        return dtype if dtype in self.dtypes or self.device == "gpu" else preferred

    def block(self, requested: int | None, *, mla: bool) -> int:
        """The KV block size vLLM runs with: the one its MLA kernel forces, else the asked."""
        if mla and self.mla_block_size:
            return self.mla_block_size
        return requested or self.block_size


def gpu_platform(profile: VersionProfile, total_bytes: int, name: str) -> Platform:
    """vLLM on a CUDA GPU of ``total_bytes`` named ``name``."""
    return Platform(
        device="gpu",
        name=name,
        total_bytes=total_bytes,
        block_size=GPU_BLOCK_SIZE,
        kernel_block=GPU_KERNEL_BLOCK,
        dtypes=GPU_DTYPES,
        batching=default_batching(profile, total_bytes, name),
        async_scheduling=True,
        gdn_checkpoints=is_hopper(name, total_bytes),
        moe_generation=gpu_generation(name, total_bytes),
    )

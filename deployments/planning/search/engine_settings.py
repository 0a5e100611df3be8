"""The engine settings a plan relies on, as the planner resolved them.

The planner does not render a command: the engine adapters (``deployments.engines``) render
every engine's command from these settings, on the web for the copy-paste line and on the host
for the spawn, so there is one renderer per engine and nothing parses a command back."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.memory.settings import Settings

from .request import PlanRequest


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What the engine must start with for the plan's figures to hold (vLLM's flags by name);
    None or False: the engine's own default."""

    gpu_memory_utilization: float | None  # None on the CPU: the KV space is given in bytes
    max_num_seqs: int
    max_num_batched_tokens: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    decode_context_parallel_size: int | None = None
    block_size: int | None = None
    enforce_eager: bool = False
    runner: str | None = None  # --runner pooling: an embedding or classification model
    convert: str | None = None  # --convert embed|classify
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes: each CPU rank's KV
    cpu_threads_bind: str | None = None  # VLLM_CPU_OMP_THREADS_BIND: one core range per rank
    # --enable-lora and its slots; None: vLLM's default (memory/lora.py)
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None


def engine_settings(req: PlanRequest, s: Settings) -> EngineSettings:
    """The resolved settings (utilization, max-num-seqs) and those the request asked for."""
    return EngineSettings(
        gpu_memory_utilization=s.gpu_memory_utilization,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=req.max_num_batched_tokens or None,
        dtype=None if req.dtype == "auto" else req.dtype,
        quantization=req.quantization or None,
        kv_cache_dtype=None if req.kv_cache_dtype == "auto" else req.kv_cache_dtype,
        decode_context_parallel_size=s.kv_rules.dcp if s.kv_rules.dcp > 1 else None,
        block_size=req.block_size or None,
        enforce_eager=req.enforce_eager,
        runner=s.runner,
        convert=s.convert,
        enable_lora=s.lora is not None,
        max_loras=s.lora.max_loras if s.lora else None,
        max_lora_rank=s.lora.max_lora_rank if s.lora else None,
        max_cpu_loras=s.lora.max_cpu_loras if s.lora else None,
    )

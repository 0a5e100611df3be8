"""The exact ``vllm serve`` command for a plan."""

from __future__ import annotations

from deployments.planning.memory.settings import Settings

from .request import PlanRequest


def serve_argv(
    req: PlanRequest, s: Settings, *, tp: int, pp: int, max_model_len: int, multi_host: bool
) -> tuple[str, ...]:
    """Positional model, then the parallel sizes and every setting the plan relies on."""
    argv = ["vllm", "serve", req.model or "MODEL"]
    if req.revision:
        argv += ["--revision", req.revision]
    argv += ["--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)]
    argv += ["--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}"]
    argv += ["--max-model-len", str(max_model_len), "--max-num-seqs", str(s.max_num_seqs)]
    if req.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(req.max_num_batched_tokens)]
    if req.dtype != "auto":
        argv += ["--dtype", req.dtype]
    if req.quantization:
        argv += ["--quantization", req.quantization]
    if req.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", req.kv_cache_dtype]
    if s.kv_rules.dcp > 1:
        argv += ["--decode-context-parallel-size", str(s.kv_rules.dcp)]
    if req.block_size:
        argv += ["--block-size", str(req.block_size)]
    if req.enforce_eager:
        argv.append("--enforce-eager")
    if multi_host:
        argv += ["--distributed-executor-backend", "ray"]
    return tuple(argv)

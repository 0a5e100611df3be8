"""JSON-able views of plan results: the CLI's contract, and a richer one for the web pages."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from deployments.planning.memory.layout import GpuMemory

from .plans import Plan, PlanResult

GPU_KEYS = (
    "weights_bytes",
    "activation_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "kv_cache_bytes",
    "total_bytes",
)
PLAN_KEYS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "replicas",
    "fits",
    "reasons",
    "warnings",
    "per_gpu",
    "kv_cache_tokens",
    "max_concurrency",
    "engine_settings",
    # added to the contract: GPUs of each replica, asked replicas, fits within the margin only
    "gpus",
    "replicas_asked",
    "tight",
    "tight_reasons",
    "device",  # "gpu", or "cpu": vLLM's CPU build, one device slot (the CPU) per replica
)


def gpu_to_json(mem: GpuMemory) -> dict[str, int]:
    """The six contract keys of one GPU."""
    return {key: int(getattr(mem, key)) for key in GPU_KEYS}


def plan_to_json(p: Plan) -> dict[str, Any]:
    """Exactly the contract keys of one plan."""
    return {
        "tensor_parallel_size": p.tensor_parallel_size,
        "pipeline_parallel_size": p.pipeline_parallel_size,
        "replicas": p.replicas,
        "fits": p.fits,
        "reasons": list(p.reasons),
        "warnings": list(p.warnings),
        "per_gpu": [gpu_to_json(m) for m in p.per_gpu],
        "kv_cache_tokens": p.kv_cache_tokens,
        "max_concurrency": p.max_concurrency,
        "engine_settings": asdict(p.engine_settings),
        "gpus": [[{"host": g.host, "index": g.index} for g in r] for r in p.gpus],
        "replicas_asked": p.replicas_asked,
        "tight": p.tight,
        "tight_reasons": list(p.tight_reasons),
        "device": p.device,
    }


def result_to_json(result: PlanResult) -> dict[str, Any]:
    """The ``plan --json`` object: ``{"plans": [...], "reason": "why the first one"}``."""
    return {"plans": [plan_to_json(p) for p in result.plans], "reason": result.reason}


def plan_details(p: Plan) -> dict[str, Any]:
    """Contract keys plus budget/free per GPU and the final max_model_len."""
    out = plan_to_json(p)
    out["max_model_len"] = p.max_model_len
    out["multi_host"] = p.multi_host
    out["context_clipped"] = p.context_clipped
    out["requested_max_model_len"] = p.requested_max_model_len
    for entry, mem in zip(out["per_gpu"], p.per_gpu, strict=True):
        entry.update(
            gpu_total_bytes=mem.gpu_total_bytes,
            budget_bytes=mem.budget_bytes,
            free_bytes=mem.free_bytes,
            lora_bytes=mem.lora_bytes,
            correction_bytes=mem.correction_bytes,
        )
    return out

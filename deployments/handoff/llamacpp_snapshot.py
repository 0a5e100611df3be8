"""The snapshot of a llama.cpp plan (`planning.LlamaCppPlan`): its llama-server flags as the
typed `EngineArgs`, and per GPU the bytes the launch leases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deployments import planning
from deployments.handoff.snapshot import EngineArgs, GpuFigures, GpuSlot, PlanSnapshot


def from_llamacpp_plan(
    p: planning.LlamaCppPlan,
    *,
    gpu_overhead_bytes: int,
    model_ref: str = "",
    request: Mapping[str, Any] | None = None,
) -> PlanSnapshot:
    """The snapshot of a llama.cpp plan: its flags as EngineArgs (``-c`` the padded cells with one
    unified KV pool, ``-np`` the slots), one replica on the plan's GPUs, and per GPU the bytes
    llama-server allocates there plus the CUDA context the planner adds to a GPU holding layers:
    what the launch leases."""
    s = p.settings
    several = p.split_mode != "none" and len(p.gpus) > 1
    engine = EngineArgs(
        max_model_len=p.context_cells,
        n_gpu_layers=p.gpu_layers,
        split_mode=p.split_mode,
        tensor_split=p.tensor_split if several else (),
        main_gpu=None if p.split_mode == "layer" else 0,
        cache_type_k=s.cache_type_k,
        cache_type_v=s.cache_type_v,
        flash_attn="on" if s.flash_attn else "off",
        n_parallel=s.slots,
        ubatch=s.ubatch,
    )
    per_gpu = tuple(
        GpuFigures(
            weights_bytes=used.weights_bytes,
            activation_bytes=used.compute_bytes,
            non_torch_bytes=gpu_overhead_bytes if used.layers else 0,
            kv_cache_bytes=used.kv_bytes,
            total_bytes=used.total_bytes + (gpu_overhead_bytes if used.layers else 0),
            gpu_total_bytes=gpu.total_bytes,
            free_bytes=gpu.free_bytes,
        )
        for gpu, used in zip(p.gpus, p.devices, strict=True)
    )
    return PlanSnapshot(
        engine_args=engine,
        model_ref=model_ref,
        request=dict(request or {}),
        gpus=(tuple(GpuSlot("", g.index) for g in p.gpus),),
        per_gpu=per_gpu,
        kv_cache_tokens=p.context_cells,
        max_concurrency=float(s.slots),
        requested_max_model_len=s.context_tokens,
        replicas=1,
        replicas_asked=1,
        fits=p.fits,
        reasons=p.reasons,
        warnings=p.warnings,
    )

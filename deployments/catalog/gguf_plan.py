"""The JSON view of a llama.cpp plan, shared by the plan panel, ``manage.py plan`` and the API.

Bytes are ints; a device entry is the CPU or one GPU, in ``-ts`` order. What the planner
counts on a GPU beyond llama.cpp's own buffers (the CUDA context and the margin) is stated per
device, so ``used_bytes`` + ``margin_bytes`` ≤ ``free_bytes`` is exactly the fit rule. No Django.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from deployments import planning
from deployments.handoff.llamacpp_snapshot import from_llamacpp_plan
from deployments.handoff.snapshot import planned_command
from deployments.planning.units import GIB, MIB, gib

ENGINE = "llama.cpp"
PARTS = (
    ("weights_bytes", "Weights"),
    ("kv_bytes", "KV cache"),
    ("compute_bytes", "Compute buffer"),
    ("overhead_bytes", "CUDA context"),
)

CACHE_TYPES = ("f16", "q8_0", "q4_0")


@dataclass(frozen=True, slots=True)
class GgufOptions:
    """The panel's llama.cpp fields, as the form, the CLI and the API give them."""

    context_tokens: int = 0
    slots: int = 1
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: bool = True
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] | None = None
    allow_partial_offload: bool = False

    def request(self) -> planning.LlamaCppRequest:
        settings = planning.LlamaCppSettings(
            context_tokens=self.context_tokens,
            slots=self.slots,
            cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v,
            flash_attn=self.flash_attn,
            split_mode=self.split_mode,
        )
        return planning.LlamaCppRequest(
            settings=settings,
            tensor_split=self.tensor_split,
            allow_partial_offload=self.allow_partial_offload,
        )


def split_text(plan: dict[str, Any]) -> str:
    """``layer split over 2 GPUs, -ts 2,1 (chosen by the planner)``, or one GPU."""
    if plan["gpus"] == 1:
        return "one GPU, no split"
    ratios = ratios_text(plan)
    who = "pinned by you" if plan["tensor_split_pinned"] else "chosen by the planner"
    return f"{plan['split_mode']} split over {plan['gpus']} GPUs, -ts {ratios} ({who})"


def ratios_text(plan: dict[str, Any]) -> str:
    return ",".join(share_text(s) for s in plan["tensor_split"])


def share_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def size_text(n_bytes: int) -> str:
    """GiB with two decimals, and smaller units where that would read 0.00 (a tiny model)."""
    if abs(n_bytes) >= GIB // 100 or n_bytes == 0:
        return f"{gib(n_bytes):.2f} GiB"
    if abs(n_bytes) >= MIB:
        return f"{n_bytes / MIB:.1f} MiB"
    return f"{n_bytes / 1024:.1f} KiB"


def parse_tensor_split(text: str) -> tuple[float, ...] | None:
    """``-ts`` as llama-server takes it: ``3,2`` or ``60/40``; blank: the planner chooses."""
    text = text.strip()
    if not text:
        return None
    try:
        shares = tuple(float(p) for p in text.replace("/", ",").split(","))
    except ValueError:
        raise planning.PlanningError(
            f"tensor split {text!r}: one number per GPU, such as 3,2"
        ) from None
    if not all(math.isfinite(s) and s >= 0 for s in shares) or sum(shares) <= 0:
        raise planning.PlanningError(f"tensor split {text!r}: shares ≥ 0, not all 0")
    return shares


def _layer_span(layers: tuple[int, ...], block_count: int) -> str:
    blocks = [il for il in layers if il < block_count]
    output = block_count in layers
    if not blocks:
        return "output layer" if output else "no blocks"
    text = f"blocks {blocks[0]}–{blocks[-1]}" if len(blocks) > 1 else f"block {blocks[0]}"
    return text + (" + output" if output else "")


def _device(
    memory: planning.DeviceMemory,
    gpu: planning.Gpu | None,
    spec: planning.GgufSpec,
    request: planning.LlamaCppRequest,
) -> dict[str, Any]:
    on_gpu = gpu is not None and bool(memory.layers)
    overhead = request.gpu_overhead_bytes if on_gpu else 0
    used = memory.total_bytes + overhead
    entry: dict[str, Any] = {
        "device": "CPU" if gpu is None else f"GPU {memory.device}",
        "gpu_index": None if gpu is None else gpu.index,
        "gpu_name": None if gpu is None else gpu.name,
        "layers": len([il for il in memory.layers if il < spec.block_count]),
        "holds_output": spec.block_count in memory.layers,
        "layer_span": _layer_span(memory.layers, spec.block_count),
        "weights_bytes": memory.weights_bytes,
        "kv_bytes": memory.kv_bytes,
        "compute_bytes": memory.compute_bytes,
        "output_buffer_bytes": memory.output_buffer_bytes,
        "overhead_bytes": overhead,
        "used_bytes": used,
    }
    if gpu is None:
        # token_embd stays on the CPU whatever -ngl says (llama.cpp's load_tensors)
        entry["token_embd_bytes"] = spec.input_bytes
        return entry
    entry["total_bytes"] = gpu.total_bytes
    entry["free_bytes"] = gpu.free_bytes
    entry["margin_bytes"] = request.margin_bytes
    entry["left_bytes"] = gpu.free_bytes - used
    return entry


def offload_cost(plan: planning.LlamaCppPlan, spec: planning.GgufSpec) -> dict[str, Any] | None:
    """What layers kept on the CPU cost: their bytes, read from host memory for every token."""
    blocks = [il for il in plan.cpu.layers if il < spec.block_count]
    if not blocks and spec.block_count not in plan.cpu.layers:
        return None
    cpu_bytes = sum(spec.layer_bytes[il] for il in blocks)
    on_gpus = sum(d.weights_bytes for d in plan.devices)
    return {
        "cpu_blocks": len(blocks),
        "cpu_layer_bytes": cpu_bytes,
        "gpu_layers": plan.gpu_layers,
        "layers_total": spec.block_count + 1,
        "text": (
            f"Partial offload: -ngl {plan.gpu_layers} of {spec.block_count + 1}, {len(blocks)} "
            f"blocks ({gib(cpu_bytes):.2f} GiB) on the CPU beside {gib(on_gpus):.2f} GiB on the "
            "GPUs. Each token reads those bytes from host memory, so generation runs at the "
            "host's memory bandwidth over them: expect several times fewer tokens/s than "
            "all on GPUs."
        ),
    }


def plan_json(
    plan: planning.LlamaCppPlan, spec: planning.GgufSpec, request: planning.LlamaCppRequest
) -> dict[str, Any]:
    """A llama.cpp plan as plain JSON: placement, per-device memory, the flags that say it."""
    s = plan.settings
    devices = [_device(plan.cpu, None, spec, request)]
    devices += [_device(m, g, spec, request) for m, g in zip(plan.devices, plan.gpus, strict=True)]
    return {
        "engine": ENGINE,
        "host": plan.host,
        "fits": plan.fits,
        "gpus": len(plan.gpus),
        "split_mode": plan.split_mode,
        "tensor_split": list(plan.tensor_split),
        "tensor_split_pinned": request.tensor_split is not None,
        "gpu_layers": plan.gpu_layers,
        "layers_total": spec.block_count + 1,
        "partial_offload_allowed": request.allow_partial_offload,
        "partial_offload": offload_cost(plan, spec),
        "context_cells": plan.context_cells,
        "settings": {
            "context_tokens": s.context_tokens,
            "slots": s.slots,
            "cache_type_k": s.cache_type_k,
            "cache_type_v": s.cache_type_v,
            "flash_attn": s.flash_attn,
            "ubatch": s.ubatch,
        },
        "cpu": devices[0],
        "devices": devices[1:],
        "flags": adapter_flags(plan),
        "reasons": list(plan.reasons),
        "warnings": list(plan.warnings),
        "note": plan.note,
    }


def adapter_flags(plan: planning.LlamaCppPlan) -> list[str]:
    """The plan's placement and size flags as the llama-server adapter renders them (the host
    spawns the same call), less the binary and the model path."""
    bridge = from_llamacpp_plan(plan, gpu_overhead_bytes=0)  # the overhead sizes leases only
    argv = list(planned_command(bridge, "llamacpp", model=_PLACEHOLDER)[1:])
    at = argv.index(_PLACEHOLDER)
    return argv[: at - 1] + argv[at + 1 :]


_PLACEHOLDER = "MODEL.gguf"


def plans_json(
    plans: tuple[planning.LlamaCppPlan, ...],
    spec: planning.GgufSpec,
    request: planning.LlamaCppRequest,
) -> dict[str, Any]:
    """``manage.py plan --json`` for a GGUF model: every plan, best first."""
    return {
        "engine": ENGINE,
        "model": spec.name,
        "file_type": spec.file_type,
        "block_count": spec.block_count,
        "context_length": spec.context_length,
        "plans": [plan_json(p, spec, request) for p in plans],
    }

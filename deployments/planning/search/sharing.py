"""Right-sized shares of a GPU: the ``--gpu-memory-utilization`` that serves a stated load, and
vLLM's start-up rule on GPUs that other deployments already partly hold.

vLLM claims ``ceil(total × gpu_memory_utilization)`` of each GPU and refuses to start unless
that much is free (``v1/worker/utils.py``), so a GPU partly held by others is plannable with
what is left on it only, and every share is a fraction of the GPU's *total*. With a load
stated (``PlanRequest.concurrency`` full-length requests at once), the fraction is sized to
hold that load plus a margin instead of taking 92 % of the GPU; without one, vLLM's default
stays, as it always did.
"""

from __future__ import annotations

import math
from dataclasses import replace

from deployments.planning.fleet.inventory import Gpu, Inventory
from deployments.planning.memory.layout import GpuMemory, LayoutMemory, evaluate_layout
from deployments.planning.memory.settings import Settings, settings_kv
from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import GIB, MIB

from . import margin
from .plans import Plan
from .request import PlanRequest

# KV cache sized above the stated load: the memory model's error on the non-KV part (within
# a few hundred MiB on the recorded cases) comes out of the KV cache, never out of the load;
# and never less than the error band margin.py marks a fit as tight within.
LOAD_MARGIN = 0.10
MIN_MARGIN_BYTES = 512 * MIB
GMU_STEP = 0.01  # the flag is written with two decimals, rounded up
STARTUP_ERROR = (
    "Free memory on device cuda:{device} ({free:.2f}/{total:.2f} GiB) on startup is less than "
    "desired GPU memory utilization ({gmu:g}, {requested:.2f} GiB). Decrease GPU memory "
    "utilization or reduce GPU memory used by other processes."
)


def sizes_share(req: PlanRequest) -> bool:
    """A load is stated and no utilization given: the planner sizes the share."""
    return req.concurrency is not None and req.gpu_memory_utilization is None


def serves(layout: LayoutMemory, req: PlanRequest) -> bool:
    """The layout holds the stated load (any layout that fits, when none is stated)."""
    return layout.fits and (req.concurrency is None or layout.max_concurrency >= req.concurrency)


def requested_bytes(total_bytes: int, gmu: float) -> int:
    """What vLLM claims of a GPU: ``ceil(total × gpu_memory_utilization)``."""
    return math.ceil(total_bytes * gmu)


def can_start(gpu: Gpu, budget_bytes: int, req: PlanRequest, *, encoder: bool = False) -> bool:
    """Whether some layout may use ``gpu``: its free memory covers vLLM's claim at the
    default utilization, or, when the share is sized per layout, at least the smallest one."""
    if gpu.busy:
        return False
    per_layout = sizes_share(req) or (encoder and req.gpu_memory_utilization is None)
    floor = requested_bytes(gpu.total_bytes, GMU_STEP) if per_layout else budget_bytes
    return gpu.free_bytes >= floor


def startup_error(gpu: Gpu, gmu: float, *, device: int = 0) -> str | None:
    """vLLM's own message when ``gpu`` has less free memory than ``gmu`` claims, else None."""
    requested = requested_bytes(gpu.total_bytes, gmu)
    if gpu.free_bytes >= requested:
        return None
    return STARTUP_ERROR.format(
        device=device,
        free=gpu.free_bytes / GIB,
        total=gpu.total_bytes / GIB,
        gmu=gmu,
        requested=requested / GIB,
    )


def largest_share(gpus: list[Gpu]) -> float:
    """The largest utilization, in steps of ``GMU_STEP``, that every GPU has free."""
    steps = min(math.floor(g.free_bytes / g.total_bytes / GMU_STEP + 1e-9) for g in gpus)
    while steps > 0 and any(
        g.free_bytes < requested_bytes(g.total_bytes, steps * GMU_STEP) for g in gpus
    ):
        steps -= 1  # float rounding at the step boundary
    return round(steps * GMU_STEP, 2)


def sized(
    spec: ModelSpec,
    req: PlanRequest,
    s: Settings,
    *,
    tp: int,
    pp: int,
    gpus: list[Gpu],
    nvlink: bool,
) -> Settings:
    """``s`` with the utilization that holds ``req.concurrency`` requests of
    ``s.max_model_len`` tokens plus the margin on every rank, capped by vLLM's default and by
    what every GPU of the layout has free; ``s`` itself when no load is stated. An encoder's
    share is always sized: it holds no KV cache, so 92 % would only keep others off the GPU."""
    if spec.encoder_only and req.gpu_memory_utilization is None:
        return _encoder_sized(spec, s, tp=tp, pp=pp, gpus=gpus, nvlink=nvlink)
    if not sizes_share(req) or req.concurrency is None:
        return s
    totals = [g.total_bytes for g in gpus]
    probe = evaluate_layout(spec, s, tp=tp, pp=pp, gpu_totals=totals, nvlink=nvlink)
    if not probe.per_gpu or not any(m.weights_bytes for m in probe.per_gpu):
        return s  # refused before any memory is sized: vLLM's own error says why
    need = max(
        _rank_need(spec, s, m, tp=tp, pp=pp, stage=r // tp, load=req.concurrency)
        / m.gpu_total_bytes
        for r, m in enumerate(probe.per_gpu)
    )
    wanted = math.ceil(need / GMU_STEP - 1e-9) * GMU_STEP
    cap = min(s.profile.default_gpu_memory_utilization, largest_share(gpus))
    return replace(s, gpu_memory_utilization=round(max(min(wanted, cap), GMU_STEP), 2))


def _encoder_sized(
    spec: ModelSpec, s: Settings, *, tp: int, pp: int, gpus: list[Gpu], nvlink: bool
) -> Settings:
    """vLLM still refuses to start unless ``utilization × total`` is free (v1/worker/utils.py:
    716-726, gpu_worker.py:542) though an encoder uses only its weights and one batch: the
    share is that plus the margin."""
    totals = [g.total_bytes for g in gpus]
    probe = evaluate_layout(spec, s, tp=tp, pp=pp, gpu_totals=totals, nvlink=nvlink)
    need = max(
        (m.total_bytes + max(math.ceil(LOAD_MARGIN * m.total_bytes), MIN_MARGIN_BYTES))
        / m.gpu_total_bytes
        for m in probe.per_gpu
    )
    wanted = math.ceil(need / GMU_STEP - 1e-9) * GMU_STEP
    cap = min(s.profile.default_gpu_memory_utilization, largest_share(gpus))
    return replace(s, gpu_memory_utilization=round(max(min(wanted, cap), GMU_STEP), 2))


def explain(layout: LayoutMemory, req: PlanRequest, s: Settings, gpus: list[Gpu]) -> LayoutMemory:
    """A sized layout that fails because other deployments hold part of a GPU says so first,
    since vLLM's advice (raise the utilization) cannot help there."""
    if (
        layout.fits
        or not sizes_share(req)
        or s.gpu_memory_utilization >= s.profile.default_gpu_memory_utilization
    ):
        return layout
    tight = min(gpus, key=lambda g: g.free_bytes / g.total_bytes)
    if tight.free_bytes >= tight.total_bytes:
        return layout
    why = (
        f"GPU {tight.index} has {_gib(tight.free_bytes)} of {_gib(tight.total_bytes)} free "
        f"(other deployments hold the rest), so vLLM may claim at most "
        f"--gpu-memory-utilization {s.gpu_memory_utilization:g} there"
    )
    return replace(layout, reasons=(why, *layout.reasons))


def _rank_need(
    spec: ModelSpec, s: Settings, mem: GpuMemory, *, tp: int, pp: int, stage: int, load: int
) -> int:
    """Bytes of vLLM's claim on one rank: everything but the KV cache, then the load's KV."""
    graphs = mem.cuda_graph_bytes if s.profile.cuda_graphs_in_budget else 0
    fixed = mem.weights_bytes + mem.lora_bytes + mem.activation_bytes + mem.non_torch_bytes + graphs
    kv = settings_kv(spec, s, tp=tp, pp=pp, stage=stage)
    load_bytes = load * kv.request_bytes(s.max_model_len, s.max_num_batched_tokens)
    # At least the planner's own error band (margin.py, taken at the probe's larger budget), so
    # that a share sized for the load is never a tight fit of it.
    error_band = margin.band(s.profile, mem, s.correction).kv_bytes
    return (
        fixed + load_bytes + max(math.ceil(LOAD_MARGIN * load_bytes), MIN_MARGIN_BYTES, error_band)
    )


def left_out(inv: Inventory, usable: dict[str, list[Gpu]]) -> list[Gpu]:
    """Idle GPUs not usable for lack of free memory: others hold part of them."""
    return [
        g
        for h in inv.hosts
        for g in h.gpus
        if not g.busy and g not in usable.get(h.name, ()) and g.free_bytes < g.total_bytes
    ]


def unplaced_reason(inv: Inventory, usable: dict[str, list[Gpu]], gmu: float) -> str | None:
    """vLLM's start-up error on the idle GPU with the most free memory that was left out for
    lack of it (other deployments hold part of it), with what to change."""
    short = left_out(inv, usable)
    if not short:
        return None
    gpu = max(short, key=lambda g: g.free_bytes)
    error = startup_error(gpu, gmu)
    if error is None:
        return None
    return (
        f"GPU {gpu.index} is partly held by other deployments: {error} State the load "
        "(concurrent requests) to size a smaller share, or set a lower utilization."
    )


def utilization(p: Plan) -> float:
    """The share of each GPU the plan's engine claims (``--gpu-memory-utilization``; a CPU
    plan's KV space is given in bytes instead: 0)."""
    return p.engine_settings.gpu_memory_utilization or 0.0


def share_lines(p: Plan, inv: Inventory, req: PlanRequest) -> tuple[str, ...]:
    """What the plan takes of each GPU of its first replica, in an operator's words: the
    sizing first when a load was stated, then one line per GPU."""
    if not p.gpus or not p.fits:
        return ()
    gpus = {(h.name, g.index): g for h in inv.hosts for g in h.gpus}
    lines = [_sizing_line(p, req)] if sizes_share(req) else []
    multi = len({ref.host for ref in p.gpus[0]}) > 1 or len(inv.hosts) > 1
    for ref, mem in zip(p.gpus[0], p.per_gpu, strict=False):
        gpu = gpus.get((ref.host, ref.index))
        if gpu is not None:
            lines.append(
                _gpu_line(gpu, mem, f"{ref.host}:{ref.index}" if multi else str(ref.index))
            )
    return tuple(line for line in lines if line)


def _sizing_line(p: Plan, req: PlanRequest) -> str:
    if req.concurrency is None:
        return ""
    gmu = utilization(p)
    load = f"{req.concurrency:,} request{'s' if req.concurrency != 1 else ''} of {p.max_model_len:,} tokens"
    if p.max_concurrency >= req.concurrency:
        return (
            f"Sized for {load} at once, with a {LOAD_MARGIN:.0%} margin: "
            f"--gpu-memory-utilization {gmu:g} rather than the whole GPU; the KV cache holds "
            f"{p.max_concurrency:.1f} such requests."
        )
    return (
        f"{load.capitalize()} at once do not fit in the memory left: at "
        f"--gpu-memory-utilization {gmu:g} the KV cache holds {p.max_concurrency:.1f}."
    )


def _gpu_line(gpu: Gpu, mem: GpuMemory, name: str) -> str:
    others = gpu.total_bytes - gpu.free_bytes
    left = max(gpu.free_bytes - mem.total_bytes, 0)
    held = (
        f", where {_gib(others)} is already held by other deployments" if others > GIB // 2 else ""
    )
    return (
        f"Reserves {_gib(mem.total_bytes)} of GPU {name} ({_gib(gpu.total_bytes)}){held}; "
        f"{_gib(left)} stays free for other deployments."
    )


def _gib(n_bytes: int) -> str:
    value = n_bytes / GIB
    return f"{value:.0f} GiB" if value >= 100 or value == round(value) else f"{value:.1f} GiB"

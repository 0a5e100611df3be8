"""llama-server plans: which GPUs, how many layers on each (``-ts``), and the flags that say so.

One llama-server runs on one machine. Layer split (``-sm layer``, the default) is a pipeline
over PCIe: each GPU holds a contiguous run of blocks and their KV cache, the last one the
output layer too. The ratios are layer counts, chosen so that the fullest GPU is as empty as
possible relative to what it can give (so unequal GPUs get unequal counts); the user may pin
them. Layers on the CPU (``-ngl`` below L+1) only when allowed, with their cost stated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from deployments.planning.errors import PlanningError
from deployments.planning.fleet.inventory import Gpu, Host, Inventory
from deployments.planning.memory.llamacpp import (
    DeviceMemory,
    LlamaCppSettings,
    cache_type_errors,
    compute_bytes,
    context_cells,
    device_memory,
    kv_bytes_per_cell,
)
from deployments.planning.model.gguf import GgufSpec
from deployments.planning.units import GIB, MIB, gib

# Per GPU, beyond what llama.cpp reports as its own: the CUDA context and cuBLAS workspace
# (0.3–0.5 GiB measured by others; Ollama's constant was 457 MiB), rounded up.
GPU_OVERHEAD_BYTES = 512 * MIB


@dataclass(frozen=True, slots=True)
class LlamaCppRequest:
    settings: LlamaCppSettings = field(default_factory=LlamaCppSettings)
    tensor_split: tuple[float, ...] | None = None  # pinned -ts, one share per GPU
    allow_partial_offload: bool = False  # may layers stay on the CPU (-ngl < L+1)?
    margin_bytes: int = 1 * GIB  # left free per GPU, as llama.cpp's --fit-target 1024 MiB
    gpu_overhead_bytes: int = GPU_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class LlamaCppPlan:
    host: str
    gpus: tuple[Gpu, ...]  # in -ts order: CUDA0, CUDA1, … after CUDA_VISIBLE_DEVICES
    gpu_layers: int  # -ngl, out of block_count + 1
    tensor_split: tuple[float, ...]  # -ts
    split_mode: str
    settings: LlamaCppSettings
    cpu: DeviceMemory
    devices: tuple[DeviceMemory, ...]  # one per GPU
    context_cells: int
    fits: bool
    reasons: tuple[str, ...]  # why it does not fit
    warnings: tuple[str, ...]
    note: str = ""  # why this many GPUs: what a split buys over one GPU, or that it buys nothing

    @property
    def all_on_gpus(self) -> bool:
        """No block (nor the output layer) left on the CPU."""
        return not self.cpu.layers


def _budget(gpu: Gpu, request: LlamaCppRequest, compute_bytes: int) -> int:
    return gpu.free_bytes - request.margin_bytes - request.gpu_overhead_bytes - compute_bytes


def _layer_costs(spec: GgufSpec, settings: LlamaCppSettings, cells: int) -> list[int]:
    costs = [
        spec.layer_bytes[il] + cells * kv_bytes_per_cell(spec, settings, [il])
        for il in range(spec.block_count)
    ]
    return [*costs, spec.output_bytes]


def balanced_counts(costs: Sequence[int], budgets: Sequence[int]) -> tuple[int, ...]:
    """Contiguous layer counts per GPU, in order, that minimise the fullest GPU's share of its
    budget (min-max over contiguous partitions; L+1 ≤ a few hundred, GPUs ≤ 8 per host)."""
    n, g = len(costs), len(budgets)
    prefix = [0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    inf = float("inf")

    def load(i: int, k: int, j: int) -> float:
        used = prefix[k] - prefix[i]
        if used == 0:
            return 0.0
        return used / budgets[j] if budgets[j] > 0 else inf

    best = [[inf] * (n + 1) for _ in range(g + 1)]
    cut = [[0] * (n + 1) for _ in range(g + 1)]
    best[0][0] = 0.0
    for j in range(1, g + 1):
        for k in range(n + 1):
            for i in range(k + 1):
                value = max(best[j - 1][i], load(i, k, j - 1))
                if value < best[j][k]:
                    best[j][k], cut[j][k] = value, i
    counts, k = [], n
    for j in range(g, 0, -1):
        counts.append(k - cut[j][k])
        k = cut[j][k]
    return tuple(reversed(counts))


def _evaluate(
    spec: GgufSpec,
    request: LlamaCppRequest,
    host: Host,
    gpus: tuple[Gpu, ...],
    gpu_layers: int,
    split: tuple[float, ...],
) -> LlamaCppPlan:
    settings = request.settings
    split_mode = settings.split_mode if len(gpus) > 1 else "none"
    memory = device_memory(spec, settings, gpu_layers=gpu_layers, splits=split)
    cpu, devices = memory[0], memory[1:]
    reasons = list(cache_type_errors(spec, settings))
    for gpu, used in zip(gpus, devices, strict=True):
        need = used.total_bytes + (request.gpu_overhead_bytes if used.layers else 0)
        if need + request.margin_bytes > gpu.free_bytes:
            reasons.append(
                f"GPU {gpu.index} ({gpu.name}) needs {gib(need):.2f} GiB + a "
                f"{gib(request.margin_bytes):.2f} GiB margin; it has {gib(gpu.free_bytes):.2f} "
                "GiB free"
            )
    warnings = []
    on_cpu = [il for il in cpu.layers if il < spec.block_count]
    if on_cpu:
        cpu_bytes = sum(spec.layer_bytes[il] for il in on_cpu)
        warnings.append(
            f"{len(on_cpu)} of {spec.block_count} blocks ({gib(cpu_bytes):.2f} GiB) stay on the "
            "CPU: every token reads them from host memory, so generation runs at the host's "
            "memory bandwidth over those bytes, typically several times slower than on a GPU"
        )
    if spec.sliding_window:
        warnings.append(
            f"sliding-window layers ({spec.sliding_window} tokens) keep a smaller KV cache "
            "in llama.cpp; the KV here is the full-context upper bound"
        )
    if not all(spec.head_count_kv):
        warnings.append(
            "blocks without attention (recurrent state) are not modelled: their state "
            "buffers are not counted"
        )
    if split_mode == "row":
        warnings.append("row split is deprecated in llama.cpp b11434; layer split is the default")
    return LlamaCppPlan(
        host=host.name,
        gpus=gpus,
        gpu_layers=gpu_layers,
        tensor_split=split,
        split_mode=split_mode,
        settings=settings,
        cpu=cpu,
        devices=devices,
        context_cells=context_cells(spec, settings),
        fits=not reasons,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
    )


def _split_for(
    spec: GgufSpec, request: LlamaCppRequest, gpus: tuple[Gpu, ...], gpu_layers: int
) -> tuple[float, ...]:
    if request.tensor_split is not None:
        if len(request.tensor_split) != len(gpus):
            raise PlanningError(
                f"--tensor-split has {len(request.tensor_split)} shares for {len(gpus)} GPUs"
            )
        return request.tensor_split
    if len(gpus) == 1:
        return (1.0,)
    settings = request.settings
    cells = context_cells(spec, settings)
    costs = _layer_costs(spec, settings, cells)[spec.block_count + 1 - gpu_layers :]
    compute = compute_bytes(spec, settings, cells)
    budgets = [_budget(gpu, request, compute) for gpu in gpus]
    return tuple(float(c) for c in balanced_counts(costs, budgets))


def _best_layers(
    spec: GgufSpec, request: LlamaCppRequest, host: Host, gpus: tuple[Gpu, ...]
) -> LlamaCppPlan:
    full = spec.block_count + 1
    plan = _evaluate(spec, request, host, gpus, full, _split_for(spec, request, gpus, full))
    if plan.fits or not request.allow_partial_offload:
        return plan
    for layers in range(full - 1, 0, -1):
        candidate = _evaluate(
            spec, request, host, gpus, layers, _split_for(spec, request, gpus, layers)
        )
        if candidate.fits:
            return candidate
    return plan


def plan_llamacpp(
    spec: GgufSpec, inventory: Inventory, request: LlamaCppRequest
) -> tuple[LlamaCppPlan, ...]:
    """Plans per host, best first. A model that fits one GPU with the context and slots asked
    runs on one (``-sm none``: no hop between GPUs per token, as llama.cpp's own guidance
    has it); a layer split over the fewest GPUs that hold it only when no single GPU does, or
    when it keeps layers off the CPU that one GPU would leave there. Each plan's ``note`` says
    which. A GPU given no layer is never in a plan (it would be leased for nothing)."""
    request.settings.validate()
    plans: list[LlamaCppPlan] = []
    for host in inventory.hosts:
        free = tuple(g for g in host.gpus if not g.busy)
        if free:
            plans += _with_notes(_host_plans(spec, request, host, free))
    if not plans:
        raise PlanningError("no free GPU in the inventory")
    return tuple(sorted(plans, key=_rank))


def _rank(p: LlamaCppPlan) -> tuple[bool, bool, int]:
    """Fitting plans first, all layers on GPUs before a partial offload, then fewer GPUs; a
    plan that does not fit comes closest with more GPUs."""
    return (not p.fits, not p.all_on_gpus, len(p.gpus) if p.fits else -len(p.gpus))


def _host_plans(
    spec: GgufSpec, request: LlamaCppRequest, host: Host, free: tuple[Gpu, ...]
) -> list[LlamaCppPlan]:
    """A pinned ``-ts`` on every free GPU; else each GPU alone, roomiest first, and a split over
    the k roomiest for every k from 2."""
    if request.tensor_split is not None:
        return [_without_idle(spec, request, host, _best_layers(spec, request, host, free))]
    by_room = sorted(free, key=lambda g: (-g.free_bytes, g.index))
    plans = [_best_layers(spec, request, host, (g,)) for g in by_room]
    seen: set[tuple[int, ...]] = {(g.index,) for g in by_room}
    for k in range(2, len(by_room) + 1):
        gpus = tuple(sorted(by_room[:k], key=lambda g: g.index))
        plan = _without_idle(spec, request, host, _best_layers(spec, request, host, gpus))
        if tuple(g.index for g in plan.gpus) not in seen:
            seen.add(tuple(g.index for g in plan.gpus))
            plans.append(plan)
    return plans


def _without_idle(
    spec: GgufSpec, request: LlamaCppRequest, host: Host, plan: LlamaCppPlan
) -> LlamaCppPlan:
    """The plan on the GPUs that hold layers: a zero share leases a GPU for nothing."""
    keep = [i for i, d in enumerate(plan.devices) if d.layers]
    if len(keep) == len(plan.gpus) or not keep:
        return plan
    gpus = tuple(plan.gpus[i] for i in keep)
    split = tuple(plan.tensor_split[i] for i in keep) if len(keep) > 1 else (1.0,)
    return _evaluate(spec, request, host, gpus, plan.gpu_layers, split)


def _with_notes(plans: list[LlamaCppPlan]) -> list[LlamaCppPlan]:
    """Say what each plan's GPU count buys against one GPU alone."""
    singles = [p for p in plans if len(p.gpus) == 1]
    single_fits = [p for p in singles if p.fits]
    whole = [p for p in single_fits if p.all_on_gpus]
    out = []
    for p in plans:
        cells = f"{p.context_cells:,}-token context for {p.settings.slots} slot(s)"
        if len(p.gpus) == 1:
            note = f"one GPU holds the model, its {cells}: no split (-sm none)"
            if not p.all_on_gpus:
                note = f"one GPU with {len(p.cpu.layers)} layer(s) left on the CPU"
        elif whole:
            note = (
                f"one GPU holds the model and its {cells}: this split over {len(p.gpus)} GPUs "
                "buys nothing and adds a hop between GPUs per token"
            )
        elif single_fits and p.all_on_gpus:
            note = (
                f"split over {len(p.gpus)} GPUs for speed: every layer on a GPU, where one GPU "
                f"would leave {min(len(s.cpu.layers) for s in single_fits)} on the CPU"
            )
        else:
            note = (
                f"split over {len(p.gpus)} GPUs for room: no free GPU alone holds the model "
                f"and its {cells}"
            )
        out.append(replace(p, note=note) if p.fits else p)
    return out


def one_machine(inventory: Inventory, *, name: str = "local") -> Inventory:
    """A what-if spec's terms as GPUs of one machine: ``1x24GiB@pcie,1x16GiB@pcie`` is read by
    ``parse_gpus`` as two hosts, but llama-server (without RPC) spans one machine's GPUs."""
    gpus = [g for h in inventory.hosts for g in h.gpus]
    renumbered = tuple(
        Gpu(i, g.name, g.total_bytes, g.free_bytes, g.busy) for i, g in enumerate(gpus)
    )
    links = {(a, b): "PXB" for a in range(len(gpus)) for b in range(a + 1, len(gpus))}
    return Inventory((Host(name, renumbered, links),))

"""Plans of vLLM's CPU build on a host's CPU: tensor parallel over its cores, weights and each
rank's KV space in RAM (``PlanRequest(device="cpu")``).

A replica is one engine on one host's CPU: one device slot (the CPU row), one memory figure for
all its ranks. The KV space is vLLM's ``--kv-cache-memory-bytes``, which every rank allocates
whole (memory/cpu_platform.py); given, it is checked against free RAM; else the planner takes
what ``max_num_seqs`` full-length requests can use, within the RAM left free after the weights,
the engine's processes and a margin (``cpu_platform.ram_margin_bytes``). KV tokens and
concurrency then come from the sizing every platform shares (memory/layout.judge_ranks).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deployments.planning.fleet.inventory import Cpu, Host, Inventory
from deployments.planning.memory import cpu_platform as platform
from deployments.planning.memory.activation import activation_bytes
from deployments.planning.memory.checks import layout_errors
from deployments.planning.memory.kvgroups import StageKv
from deployments.planning.memory.layout import GpuMemory, LayoutMemory, judge_ranks, rank_lora_bytes
from deployments.planning.memory.settings import Settings, settings_kv
from deployments.planning.memory.weights import Shard, rank_weights_bytes
from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import gib

from .engine_settings import EngineSettings
from .plans import GpuRef, Plan, PlanResult
from .request import PlanRequest, is_sparse_mla, resolve_on

MAX_TP = 64  # tensor parallel sizes tried: powers of two and the NUMA node count, up to this


def plan_cpu(spec: ModelSpec, inventory: Inventory, req: PlanRequest) -> PlanResult:
    """Every TP size on every host's CPU, best first: those that fit, then one rank per NUMA
    node (vLLM's advice for its CPU backend), then fewer ranks, then more KV tokens."""
    hosts = [h for h in inventory.hosts if h.cpu is not None]
    if not hosts:
        return PlanResult((), "no host offers its CPU to plan on")
    plans = [_plan(spec, h, h.cpu, req, tp) for h in hosts if h.cpu for tp in _tp_sizes(req, h.cpu)]
    plans = _replicated(plans, req)
    numa = {h.name: h.cpu.numa_nodes for h in hosts if h.cpu is not None}
    plans.sort(key=lambda p: _rank(p, req, numa))
    return PlanResult(tuple(plans), _reason(plans, req))


def _tp_sizes(req: PlanRequest, cpu: Cpu) -> list[int]:
    if req.tensor_parallel_size is not None:
        return [req.tensor_parallel_size]
    sizes = {1, *(1 << k for k in range(1, 7)), cpu.numa_nodes}
    return sorted(n for n in sizes if n <= min(cpu.cores, MAX_TP))


def resolve_cpu(spec: ModelSpec, req: PlanRequest, cpu: Cpu, ranks: int) -> Settings:
    """The request with every default ``vllm serve`` takes on this CPU: the GPU's resolution
    on the CPU platform's inputs (memory/cpu_platform.platform)."""
    return resolve_on(spec, req, platform.platform(_kind(cpu), cpu.total_bytes, ranks))


def _kind(cpu: Cpu) -> platform.CpuKind:
    return platform.CpuKind(arch=cpu.arch, isa=cpu.isa, name=cpu.name)


def _plan(spec: ModelSpec, host: Host, cpu: Cpu, req: PlanRequest, tp: int) -> Plan:
    s = resolve_cpu(spec, req, cpu, tp)
    bind = platform.threads_bind(cpu.cpu_ids, tp)
    kv = settings_kv(spec, s, tp=tp, pp=1, stage=0)
    reasons = _refusals(spec, req, s, cpu, tp, bind)
    if reasons:
        empty = LayoutMemory(tp, 1, (), 0, s.max_model_len, tuple(reasons), (), s.max_model_len)
        return _finish(host, cpu, req, s, empty, _Ram(0, 0, 0, 0), bind)
    shard = Shard(tp, 1, 0, s.dtype_bytes, s.quant)
    ram = _Ram(
        # LoRA slots are allocated with the weights (memory/lora.py), on the CPU as on a GPU
        weights=tp * (rank_weights_bytes(spec, shard) + rank_lora_bytes(spec, s, tp, 1, 0)),
        activation=tp * activation_bytes(spec, shard, s),
        runtime=platform.ENGINE_BASE_BYTES + tp * platform.RANK_RUNTIME_BYTES,
        kv_per_rank=0,
    )
    room = cpu.free_bytes - platform.ram_margin_bytes(cpu.total_bytes) - ram.non_kv
    ram = replace(ram, kv_per_rank=req.kv_cache_bytes or _chosen_kv(kv, s, max(room, 0) // tp))
    rank = GpuMemory(0, 0, 0, 0, ram.kv_per_rank, 0, cpu.total_bytes, 0)
    layout = judge_ranks(s, tp, 1, [(rank, kv)] * tp)
    too_small = _ram_reasons(cpu, req, ram, tp, room)
    if too_small:  # in place of vLLM's GPU-worded "No available memory for the cache blocks"
        layout = replace(layout, reasons=tuple(too_small))
    return _finish(host, cpu, req, s, layout, ram, bind)


@dataclass(frozen=True, slots=True)
class _Ram:
    """What one engine holds of the host's RAM, all ranks together."""

    weights: int
    activation: int
    runtime: int  # the API server and EngineCore, and each worker's torch runtime
    kv_per_rank: int

    @property
    def non_kv(self) -> int:
        return self.weights + self.activation + self.runtime


def _refusals(
    spec: ModelSpec, req: PlanRequest, s: Settings, cpu: Cpu, tp: int, bind: str
) -> list[str]:
    """vLLM's refusals before any memory is sized, the CPU's own first."""
    out = platform.refusals(
        _kind(cpu),
        dtype=s.dtype,
        kv_cache_dtype=req.kv_cache_dtype,
        block_size=s.block_size,
        head_size=spec.head_dim,
        mla=spec.mla is not None,
        sleep_mode=req.sleep_mode,
        sparse_mla=is_sparse_mla(spec),
        ungated_moe=spec.moe is not None and not spec.gated_mlp,
    )
    if cpu.busy:
        out.append("this CPU already runs an engine")
    if (req.pipeline_parallel_size or 1) > 1:
        out.append("the planner plans vLLM on one host's CPU with tensor parallelism only")
    if not bind:
        out.append(f"tensor parallel size {tp} needs a core per rank; this CPU has {cpu.cores}")
    return out + layout_errors(spec, tp, 1, s)


def _chosen_kv(kv: StageKv, s: Settings, room_per_rank: int) -> int:
    """What ``max_num_seqs`` requests of ``max_model_len`` can use (plus the null block),
    within the room each rank has: whole blocks, so that the tokens are exact."""
    if kv.block_bytes == 0:
        return 0
    wanted = s.max_num_seqs * kv.request_pages(s.max_model_len, s.max_num_batched_tokens) + 1
    return max(min(wanted, room_per_rank // kv.block_bytes), 0) * kv.block_bytes


def _ram_reasons(cpu: Cpu, req: PlanRequest, ram: _Ram, tp: int, room: int) -> list[str]:
    """RAM too small for the weights, the engine and the KV space."""
    margin = platform.ram_margin_bytes(cpu.total_bytes)
    if req.kv_cache_bytes is not None and ram.kv_per_rank * tp > room:
        available = max(cpu.free_bytes - ram.non_kv, 0)
        return [
            f"Available memory on node 0 ({gib(available):.2f}/{gib(cpu.total_bytes):.2f} GiB) "
            f"on kv cache allocation is less than requested memory for kv "
            f"({gib(ram.kv_per_rank):.2f} GiB on each of {tp} ranks, with a {gib(margin):.2f} "
            "GiB margin). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce "
            "CPU memory used by other processes."
        ]
    if room <= 0:
        return [
            f"RAM too small: the weights and the engine's processes need {gib(ram.non_kv):.2f} "
            f"GiB and a {gib(margin):.2f} GiB margin stays free, with {gib(cpu.free_bytes):.2f} "
            f"of {gib(cpu.total_bytes):.2f} GiB free"
        ]
    return []


def _finish(
    host: Host, cpu: Cpu, req: PlanRequest, s: Settings, layout: LayoutMemory, ram: _Ram, bind: str
) -> Plan:
    tp = layout.tensor_parallel_size
    kv_bytes = ram.kv_per_rank * tp
    used = ram.non_kv + kv_bytes
    budget = max(cpu.free_bytes - platform.ram_margin_bytes(cpu.total_bytes), 0)
    memory = GpuMemory(
        ram.weights, ram.activation, ram.runtime, 0, kv_bytes, used, cpu.total_bytes, budget
    )
    return Plan(
        tensor_parallel_size=tp,
        pipeline_parallel_size=1,
        replicas=1 if layout.fits else 0,
        fits=layout.fits,
        reasons=layout.reasons,
        warnings=layout.warnings,
        per_gpu=(memory,),
        kv_cache_tokens=layout.kv_cache_tokens,
        max_concurrency=round(layout.max_concurrency, 2),
        engine_settings=_engine_settings(req, s, ram.kv_per_rank, bind),
        gpus=((GpuRef(host.name, cpu.index),),),
        max_model_len=layout.max_model_len,
        requested_max_model_len=layout.requested_max_model_len,
        longest_fitting_len=layout.longest_fitting_len,
        replicas_asked=req.replicas or 0,
        device="cpu",
    )


def _engine_settings(req: PlanRequest, s: Settings, kv_bytes: int, bind: str) -> EngineSettings:
    """The CPU engine's flags: its KV space in bytes (no utilization share), its core ranges."""
    return EngineSettings(
        gpu_memory_utilization=None,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=req.max_num_batched_tokens or None,
        dtype=None if req.dtype == "auto" else req.dtype,
        quantization=req.quantization or None,
        kv_cache_dtype=None if req.kv_cache_dtype == "auto" else req.kv_cache_dtype,
        block_size=req.block_size or None,
        enforce_eager=req.enforce_eager,
        runner=s.runner,
        convert=s.convert,
        kv_cache_memory_bytes=kv_bytes or None,
        cpu_threads_bind=bind or None,
    )


def _replicated(plans: list[Plan], req: PlanRequest) -> list[Plan]:
    """With N replicas asked, one plan per TP size over the N best hosts whose CPU fits it (one
    engine per CPU: two would contend for the same cores)."""
    if not req.replicas or req.replicas == 1:
        return plans
    out = []
    for tp in sorted({p.tensor_parallel_size for p in plans}):
        alike = [p for p in plans if p.tensor_parallel_size == tp]
        fitting = sorted((p for p in alike if p.fits), key=lambda p: -p.kv_cache_tokens)
        taken = fitting[: req.replicas]
        if not taken:
            out.append(alike[0])
            continue
        first = taken[0]
        short = len(taken) < req.replicas
        why = f"replica {len(taken) + 1} of {req.replicas}: only {len(taken)} host CPUs fit it"
        out.append(
            replace(
                first,
                replicas=len(taken),
                fits=not short,
                reasons=(why, *first.reasons) if short else first.reasons,
                gpus=tuple(p.gpus[0] for p in taken),
            )
        )
    return out


def _rank(p: Plan, req: PlanRequest, numa: dict[str, int]) -> tuple[float, ...]:
    """Fitting first (a forced TP leads), then one rank per NUMA node, fewer ranks, more KV."""
    host = p.gpus[0][0].host if p.gpus and p.gpus[0] else ""
    pinned = 0 if p.tensor_parallel_size == req.tensor_parallel_size else 1
    off_numa = abs(p.tensor_parallel_size - numa.get(host, 1))
    return (pinned, not p.fits, p.context_clipped, off_numa, p.tensor_parallel_size,
            -p.kv_cache_tokens)  # fmt: skip


def _reason(plans: list[Plan], req: PlanRequest) -> str:
    if not plans:
        return ""
    first = plans[0]
    if first.tensor_parallel_size == req.tensor_parallel_size:
        return f"{first.label} is the layout you asked for."
    if not first.fits:
        return f"No layout fits this host's CPU: {first.reasons[0]}" if first.reasons else ""
    if first.tensor_parallel_size > 1:
        return f"{first.label}: one rank per NUMA node, as vLLM advises for its CPU backend."
    return f"{first.label}: one rank over all the cores of one NUMA node."

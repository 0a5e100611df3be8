"""Plan search: every TP × PP layout over an inventory, placed, judged and ranked."""

from __future__ import annotations

from . import choice
from .argv import serve_argv
from .inventory import Gpu, Inventory, link_rank
from .memory import LayoutMemory, evaluate_layout
from .placement import Replica, TpGroup, replicas, tp_groups
from .plans import GpuRef, Plan, PlanResult
from .request import PlanRequest, Settings, resolve
from .spec import ModelSpec


def plan(spec: ModelSpec, inventory: Inventory, request: PlanRequest) -> PlanResult:
    """Enumerate, place and rank every layout of ``spec`` on ``inventory``."""
    request.validate()
    usable = _usable(spec, inventory, request)
    forced = _forced(request)
    layouts = _layouts(inventory, usable, forced)
    groups: dict[int, dict[str, list[TpGroup]]] = {}
    for tp in sorted({tp for tp, _ in layouts}):
        groups[tp] = {h.name: tp_groups(h, usable[h.name], tp) for h in inventory.hosts}
    plans = [
        _plan_layout(spec, inventory, request, usable, groups[tp], tp, pp) for tp, pp in layouts
    ]
    plans.sort(key=lambda p: choice.rank_key(p, request, forced))
    return PlanResult(tuple(plans), choice.reason(plans, request, forced))


def _usable(spec: ModelSpec, inv: Inventory, req: PlanRequest) -> dict[str, list[Gpu]]:
    out: dict[str, list[Gpu]] = {}
    for host in inv.hosts:
        gpus = [g for g in host.gpus if not g.busy]
        out[host.name] = [g for g in gpus if g.free_bytes >= _budget(spec, req, g)]
    return out


def _budget(spec: ModelSpec, req: PlanRequest, gpu: Gpu) -> int:
    s = resolve(spec, req, gpu.total_bytes, gpu.name)
    return int(gpu.total_bytes * s.gpu_memory_utilization)


def _forced(req: PlanRequest) -> tuple[int, int] | None:
    if req.tensor_parallel_size is None and req.pipeline_parallel_size is None:
        return None
    return req.tensor_parallel_size or 1, req.pipeline_parallel_size or 1


def _layouts(
    inv: Inventory, usable: dict[str, list[Gpu]], forced: tuple[int, int] | None
) -> list[tuple[int, int]]:
    total = sum(len(g) for g in usable.values())
    widest = max((len(h.gpus) for h in inv.hosts), default=0)
    found = [(t, p) for t in range(1, widest + 1) for p in range(1, total // t + 1)]
    if forced is not None and forced not in found:
        found.insert(0, forced)
    return found


def _plan_layout(
    spec: ModelSpec,
    inv: Inventory,
    req: PlanRequest,
    usable: dict[str, list[Gpu]],
    groups: dict[str, list[TpGroup]],
    tp: int,
    pp: int,
) -> Plan:
    placed = replicas(groups, pp, multi_host=True)
    if not placed:
        return _unplaced(spec, inv, req, usable, tp, pp)
    judged = _judge_replicas(spec, req, tp, pp, placed)
    fitting = [(r, lay) for r, lay, _ in judged if lay.fits]
    replica, layout, s = next(((r, lay, st) for r, lay, st in judged if lay.fits), judged[0])
    chosen = [replica] + [r for r, _ in fitting if r is not replica]
    return _finish(inv, req, s, layout, chosen if fitting else [replica])


def _judge_replicas(
    spec: ModelSpec, req: PlanRequest, tp: int, pp: int, placed: list[Replica]
) -> list[tuple[Replica, LayoutMemory, Settings]]:
    """Each replica judged on its own GPUs (identical GPU sizes are judged once)."""
    seen: dict[tuple[tuple[int, ...], bool, str], tuple[LayoutMemory, Settings]] = {}
    out = []
    for replica in placed:
        gpus = [gpu for _, gpu in replica.gpus]
        nvlink = all(g.quality == 0 for g in replica.stages)
        smallest = min(gpus, key=lambda g: g.total_bytes)
        key = (tuple(g.total_bytes for g in gpus), nvlink, smallest.name)
        if key not in seen:
            s = resolve(spec, req, smallest.total_bytes, smallest.name)
            totals = [g.total_bytes for g in gpus]
            seen[key] = evaluate_layout(spec, s, tp=tp, pp=pp, gpu_totals=totals, nvlink=nvlink), s
        out.append((replica, *seen[key]))
    return out


def _finish(
    inv: Inventory, req: PlanRequest, s: Settings, layout: LayoutMemory, placed: list[Replica]
) -> Plan:
    first = placed[0]
    multi = first.multi_host
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    command = serve_argv(req, s, tp=tp, pp=pp, max_model_len=layout.max_model_len, multi_host=multi)
    count = len(placed) if layout.fits else 0
    return Plan(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        replicas=count,
        fits=layout.fits,
        reasons=layout.reasons,
        warnings=layout.warnings + _link_warnings(inv, first),
        per_gpu=layout.per_gpu,
        kv_cache_tokens=layout.kv_cache_tokens,
        max_concurrency=round(layout.max_concurrency, 2),
        command=command,
        gpus=tuple(tuple(GpuRef(h, g.index) for h, g in r.gpus) for r in placed[: max(count, 1)]),
        max_model_len=layout.max_model_len,
        multi_host=multi,
        link_rank=max(g.quality for g in first.stages),
        requested_max_model_len=layout.requested_max_model_len,
    )


def _link_warnings(inv: Inventory, replica: Replica) -> tuple[str, ...]:
    out = []
    worst: TpGroup = max(replica.stages, key=lambda g: g.quality)
    if worst.quality >= link_rank("SYS"):
        out.append(f"TP group crosses CPU sockets ({worst.worst_link}): all-reduce will be slow")
    elif worst.quality > 0:
        out.append(f"TP over PCIe ({worst.worst_link}), not NVLink: all-reduce will be slower")
    if replica.multi_host:
        out.append("pipeline stages span hosts: needs a Ray cluster (Ray backend)")
    elif len(replica.stages) > 1 and replica.stage_link(inv) >= link_rank("SYS"):
        out.append("pipeline stages cross CPU sockets")
    return tuple(out)


def _unplaced(
    spec: ModelSpec,
    inv: Inventory,
    req: PlanRequest,
    usable: dict[str, list[Gpu]],
    tp: int,
    pp: int,
) -> Plan:
    idle = sum(len(g) for g in usable.values())
    widest = max((len(g) for g in usable.values()), default=0)
    if tp > widest:
        why = f"tensor parallel size {tp} needs {tp} usable GPUs on one host; the most is {widest}"
    else:
        why = f"needs {tp * pp} GPUs; only {idle} are idle with enough free memory"
    probe = next((h.gpus[0] for h in inv.hosts if h.gpus), None)
    total = probe.total_bytes if probe else 0
    s = resolve(spec, req, total, probe.name if probe else "")
    layout = evaluate_layout(spec, s, tp=tp, pp=pp, gpu_totals=[total] * (tp * pp))
    reasons = (why, *layout.reasons)
    command = serve_argv(req, s, tp=tp, pp=pp, max_model_len=layout.max_model_len, multi_host=False)
    return Plan(
        tp,
        pp,
        0,
        False,
        reasons,
        layout.warnings,
        layout.per_gpu,
        layout.kv_cache_tokens,
        round(layout.max_concurrency, 2),
        command,
        (),
        layout.max_model_len,
        requested_max_model_len=layout.requested_max_model_len,
    )

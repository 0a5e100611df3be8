"""Plan search: TP × PP layouts over an inventory, placed, judged and ranked.

Polynomial in the fleet: TP groups are worked out once per kind of host
(fleet.placement.GroupCache), each layout is judged once per kind of GPU, and per TP size the
pipeline stages run from the fewest whose memory could hold the weights up to one past the
first layout that serves the request (never past the model's layers), so 1,024 GPUs try about
as many layouts as 16.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from deployments.planning.errors import PlanningError
from deployments.planning.fleet.inventory import Gpu, Inventory, link_rank
from deployments.planning.fleet.placement import GroupCache, Replica, TpGroup, replicas
from deployments.planning.memory.checks import layout_errors
from deployments.planning.memory.layout import LayoutMemory, evaluate_layout
from deployments.planning.memory.settings import Settings
from deployments.planning.memory.weights import Shard, rank_weights_bytes
from deployments.planning.model.spec import ModelSpec

from . import choice, replica_choice, sharing
from .cpu import plan_cpu
from .engine_settings import engine_settings
from .plans import GpuRef, Plan, PlanResult
from .request import PlanRequest, resolve

MAX_LAYOUTS = 512  # one request's work stays bounded whatever the inventory and the model
CUT_SHORT = "search cut short"
# a rank holds at least its share of the weights; the slack covers rounding in that bound
WEIGHTS_SLACK = 0.9


def plan(
    spec: ModelSpec,
    inventory: Inventory,
    request: PlanRequest,
    *,
    clock: Callable[[], float] | None = None,
    deadline: float | None = None,
) -> PlanResult:
    """Place, judge and rank the layouts of ``spec`` on ``inventory``, best first.

    Given a ``clock`` and a ``deadline`` on it, the search stops once ``clock() >= deadline``
    and returns the plans found so far with ``cut_short`` set and a note saying so. The clock
    is read before each layout, so the overshoot is one layout (milliseconds; about 0.1 s for
    a model of 10,000 layers over 1,024 GPUs).

    ``request.device == "cpu"`` plans vLLM's CPU build on the hosts' CPUs instead (search/cpu.py).
    """
    request.validate()
    if (clock is None) != (deadline is None):
        raise PlanningError("plan() takes a clock and a deadline together")
    if request.device == "cpu":
        return plan_cpu(spec, inventory, request)  # a few TP sizes per host: no time budget
    search = _Search.of(spec, inventory, request)
    plans, why = _search(search, _late(clock, deadline))
    plans.sort(key=lambda p: choice.rank_key(p, request, search.forced))
    note = f"{CUT_SHORT} ({why}): {_tried(len(plans))}" if why else ""
    reason = choice.reason(plans, request, search.forced)
    return PlanResult(tuple(plans), reason, cut_short=bool(why), note=note)


@dataclass(frozen=True, slots=True)
class _Search:
    """One request's inputs, and the TP groups of each size as they are first needed."""

    spec: ModelSpec
    inv: Inventory
    req: PlanRequest
    usable: dict[str, list[Gpu]]
    forced: tuple[int, int] | None
    weights_bytes: int  # the whole model on one rank: no layout holds less in all
    best_budget_bytes: int
    cache: GroupCache = field(default_factory=GroupCache)
    groups: dict[int, dict[str, list[TpGroup]]] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: ModelSpec, inv: Inventory, req: PlanRequest) -> _Search:
        budgets: dict[tuple[int, str], int] = {}
        usable = _usable(spec, inv, req, budgets)
        probe = next((g for gpus in usable.values() for g in gpus), None)
        s = resolve(spec, req, probe.total_bytes, probe.name) if probe else None
        weights = rank_weights_bytes(spec, Shard(1, 1, 0, s.dtype_bytes, s.quant)) if s else 0
        best = max(budgets.values(), default=0)
        return cls(spec, inv, req, usable, _forced(req), weights, best)

    @property
    def usable_count(self) -> int:
        return sum(len(g) for g in self.usable.values())

    def layout(self, tp: int, pp: int) -> Plan:
        if tp not in self.groups:
            self.groups[tp] = {
                h.name: self.cache.groups(h, self.usable[h.name], tp) for h in self.inv.hosts
            }
        return _plan_layout(self.spec, self.inv, self.req, self.usable, self.groups[tp], tp, pp)


def _tried(count: int) -> str:
    if count == 0:
        return "no layout was tried"
    return f"the best of the {count} layouts tried so far" if count > 1 else "one layout tried"


def _late(clock: Callable[[], float] | None, deadline: float | None) -> Callable[[], bool]:
    if clock is None or deadline is None:
        return lambda: False
    return lambda: clock() >= deadline


def _search(s: _Search, late: Callable[[], bool]) -> tuple[list[Plan], str]:
    """Round by round, one more pipeline stage for each TP size still open, so that the likely
    winners (fewest stages) come first. A TP size closes one stage after a layout serves the
    request, as more stages only rank lower (choice.rank_key), or once its GPUs run out."""
    plans: list[Plan] = []
    if s.forced is not None:
        if late():
            return plans, "the time budget ran out"
        plans.append(s.layout(*s.forced))
    steps = {tp: iter(_stage_counts(s, tp)) for tp in range(1, _widest(s.inv) + 1)}
    served: set[int] = set()
    while steps:
        for tp, pp in _next_round(steps):
            if late():
                return plans, "the time budget ran out"
            if len(plans) >= MAX_LAYOUTS:
                return plans, f"at most {MAX_LAYOUTS} layouts a request"
            p = plans[0] if (tp, pp) == s.forced else s.layout(tp, pp)
            if (tp, pp) != s.forced:
                plans.append(p)
            if not p.gpus or tp in served or _short_for_good(p, s.usable_count):
                steps.pop(tp, None)
            elif choice.tier(p, s.req) == choice.SERVES:
                served.add(tp)  # one more stage still: it may be the runner-up the reason names
    return plans, ""


def _short_for_good(p: Plan, usable: int) -> bool:
    """Short of the replicas asked, and one more stage (more GPUs each) could place no more."""
    if not p.replicas_asked or p.replicas >= p.replicas_asked:
        return False
    return usable // (p.gpus_per_replica + p.tensor_parallel_size) <= p.replicas


def _next_round(steps: dict[int, Iterator[int]]) -> list[tuple[int, int]]:
    out = []
    for tp in list(steps):
        pp = next(steps[tp], None)
        if pp is None:
            del steps[tp]
        else:
            out.append((tp, pp))
    return out


def _stage_counts(s: _Search, tp: int) -> list[int]:
    """1, then from the fewest stages whose memory could hold the weights, up to the layers."""
    top = min(s.usable_count // tp, s.spec.num_layers)
    if top < 1:  # one row says why, when other deployments hold part of an idle GPU
        return [1] if tp == 1 and sharing.left_out(s.inv, s.usable) else []
    probe = next(g for gpus in s.usable.values() for g in gpus)
    settings = resolve(s.spec, s.req, probe.total_bytes, probe.name)
    if layout_errors(s.spec, tp, 1, settings):
        return [1]  # the TP size itself is refused: one row says why
    need = WEIGHTS_SLACK * s.weights_bytes / max(tp * s.best_budget_bytes, 1)
    return [1, *range(max(2, math.ceil(need)), top + 1)]


def _widest(inv: Inventory) -> int:
    return max((len(h.gpus) for h in inv.hosts), default=0)


def _usable(
    spec: ModelSpec, inv: Inventory, req: PlanRequest, budgets: dict[tuple[int, str], int]
) -> dict[str, list[Gpu]]:
    out: dict[str, list[Gpu]] = {}
    for host in inv.hosts:
        out[host.name] = [
            g
            for g in host.gpus
            if sharing.can_start(g, _budget(spec, req, g, budgets), req, encoder=spec.encoder_only)
        ]
    return out


def _budget(
    spec: ModelSpec, req: PlanRequest, gpu: Gpu, budgets: dict[tuple[int, str], int]
) -> int:
    key = (gpu.total_bytes, gpu.name)
    if key not in budgets:
        s = resolve(spec, req, gpu.total_bytes, gpu.name)
        budgets[key] = int(gpu.total_bytes * s.gpu_memory_utilization)
    return budgets[key]


def _forced(req: PlanRequest) -> tuple[int, int] | None:
    if req.tensor_parallel_size is None and req.pipeline_parallel_size is None:
        return None
    return req.tensor_parallel_size or 1, req.pipeline_parallel_size or 1


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
    placed = replica_choice.ordered(placed, req.placement)
    judged = _judge_replicas(spec, req, tp, pp, placed)
    # A replica that holds the stated load on what its GPUs have free leads (stable: the
    # placement order stays among those alike); those after it run its command.
    judged.sort(key=lambda j: not sharing.serves(j[1], req))
    chosen = replica_choice.take(judged, req)
    _, layout, s = chosen[0] if chosen else judged[0]
    short = ""
    if chosen and req.replicas and len(chosen) < req.replicas:
        short = replica_choice.short_reason(judged, chosen, usable, inv, req)
    tight = replica_choice.tight(spec, req, chosen)
    placed = [r for r, _, _ in chosen] or [judged[0][0]]
    return _finish(inv, req, s, layout, placed, short=short, tight=tight)


# GPU sizes and free bytes, NVLink, kind, --max-num-seqs
_JudgeKey = tuple[tuple[tuple[int, int], ...], bool, str, int]


def _judge_replicas(
    spec: ModelSpec, req: PlanRequest, tp: int, pp: int, placed: list[Replica]
) -> list[tuple[Replica, LayoutMemory, Settings]]:
    """Each replica judged on its own GPUs (GPUs alike in size and free memory are judged
    once); a share sized for a stated load is sized on the replica's own free memory. All run
    the first fitting replica's command, so those after it are judged with its --max-num-seqs."""
    seen: dict[_JudgeKey, tuple[LayoutMemory, Settings]] = {}
    pin = 0
    out = []
    for replica in placed:
        gpus = [gpu for _, gpu in replica.gpus]
        nvlink = all(g.quality == 0 for g in replica.stages)
        smallest = min(gpus, key=lambda g: g.total_bytes)
        key = (tuple((g.total_bytes, g.free_bytes) for g in gpus), nvlink, smallest.name, pin)
        if key not in seen:
            s = resolve(spec, req, smallest.total_bytes, smallest.name)
            s = replace(s, max_num_seqs=pin) if pin and s.max_num_seqs != pin else s
            s = sharing.sized(spec, req, s, tp=tp, pp=pp, gpus=gpus, nvlink=nvlink)
            totals = [g.total_bytes for g in gpus]
            layout = evaluate_layout(spec, s, tp=tp, pp=pp, gpu_totals=totals, nvlink=nvlink)
            seen[key] = sharing.explain(layout, req, s, gpus), s
        layout, s = seen[key]
        if not pin and layout.fits:
            pin = s.max_num_seqs
            seen[(*key[:3], pin)] = seen[key]  # GPUs alike after it: the same judgement
        out.append((replica, layout, s))
    return out


def _finish(
    inv: Inventory,
    req: PlanRequest,
    s: Settings,
    layout: LayoutMemory,
    placed: list[Replica],
    *,
    short: str,
    tight: tuple[str, ...],
) -> Plan:
    first = placed[0]
    multi = first.multi_host
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    count = len(placed) if layout.fits else 0
    return Plan(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        replicas=count,
        fits=layout.fits and not short,
        reasons=(short, *layout.reasons) if short else layout.reasons,
        warnings=layout.warnings + _link_warnings(inv, first),
        per_gpu=layout.per_gpu,
        kv_cache_tokens=layout.kv_cache_tokens,
        max_concurrency=round(layout.max_concurrency, 2),
        engine_settings=engine_settings(req, s),
        gpus=tuple(tuple(GpuRef(h, g.index) for h, g in r.gpus) for r in placed[: max(count, 1)]),
        max_model_len=layout.max_model_len,
        multi_host=multi,
        link_rank=max(g.quality for g in first.stages),
        requested_max_model_len=layout.requested_max_model_len,
        longest_fitting_len=layout.longest_fitting_len,
        tight_reasons=tight,
        replicas_asked=req.replicas or 0,
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
    if req.replicas:
        why = f"replica 1 of {req.replicas}: {why}"
    probe = next((h.gpus[0] for h in inv.hosts if h.gpus), None)
    total = probe.total_bytes if probe else 0
    s = resolve(spec, req, total, probe.name if probe else "")
    layout = evaluate_layout(spec, s, tp=tp, pp=pp, gpu_totals=[total] * (tp * pp))
    shared = sharing.unplaced_reason(inv, usable, s.gpu_memory_utilization)
    reasons = (*((shared,) if shared else ()), why, *layout.reasons)
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
        engine_settings(req, s),
        (),
        layout.max_model_len,
        requested_max_model_len=layout.requested_max_model_len,
        longest_fitting_len=layout.longest_fitting_len,
        replicas_asked=req.replicas or 0,
    )

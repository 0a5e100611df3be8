"""Replicas of one layout: their order on the hosts, how many to take, why one is missing,
and which of them fit only within the planner's margin."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from deployments.planning.fleet.inventory import Gpu, Inventory
from deployments.planning.fleet.placement import Replica
from deployments.planning.memory.layout import LayoutMemory
from deployments.planning.memory.settings import Settings
from deployments.planning.model.spec import ModelSpec

from .margin import layout_tight, startup_tight
from .request import PlanRequest

Judged = tuple[Replica, LayoutMemory, Settings]


def ordered(placed: list[Replica], placement: str) -> list[Replica]:
    """Best-linked replicas first (a replica's TP links set its speed), and among those alike:
    ``spread``, one replica per host in turn, so that a lost host takes the fewest replicas
    with it; ``packed``, host by host, leaving whole hosts free for other deployments.
    Replicas whose stages span hosts come last either way."""
    spread = placement == "spread"
    turn: Counter[str] = Counter()
    keys = []
    for pos, r in enumerate(placed):
        stages = r.stages
        host = stages[0].host.name
        if len(stages) == 1:
            multi, quality = False, stages[0].quality
        else:
            multi, quality = r.multi_host, max(g.quality for g in stages)
        keys.append((multi, quality, turn[host] if spread else 0, pos))
        turn[host] += 1
    return [placed[k[3]] for k in sorted(keys)]


def take(judged: list[Judged], req: PlanRequest) -> list[Judged]:
    """The replicas that serve like the first one that fits, in placement order; at most
    ``req.replicas`` of them. They all run its command: on GPUs of another kind a replica must
    hold its context and, when asked, its concurrency too."""
    first = next((lay for _, lay, _ in judged if lay.fits), None)
    if first is None:
        return []
    alike = [j for j in judged if not _unlike(j[1], first, req)]
    return alike[: req.replicas] if req.replicas else alike


def _unlike(lay: LayoutMemory, first: LayoutMemory, req: PlanRequest) -> str:
    """Why a replica's GPUs cannot serve like the first replica's ("" when they can)."""
    if not lay.fits:
        return lay.reasons[0] if lay.reasons else "the layout does not fit on them"
    if lay.max_model_len < first.max_model_len:
        return f"they serve at most {lay.max_model_len:,} tokens, not {first.max_model_len:,}"
    wanted = min(req.concurrency, first.max_concurrency) if req.concurrency else 0
    if lay.max_concurrency < wanted:
        return f"they hold {lay.max_concurrency:.1f} full-length requests at once, not {wanted:g}"
    return ""


def short_reason(
    judged: list[Judged],
    chosen: list[Judged],
    usable: dict[str, list[Gpu]],
    inv: Inventory,
    req: PlanRequest,
) -> str:
    """Why replica ``len(chosen) + 1`` of ``req.replicas`` could not be placed."""
    first = chosen[0][1]
    asked = req.replicas or 0
    tp, pp = first.tensor_parallel_size, first.pipeline_parallel_size
    head = f"replica {len(chosen) + 1} of {asked}"
    taken = {(h, g.index) for r, _, _ in chosen for h, g in r.gpus}
    unlike = [(r, why) for r, lay, _ in judged if (why := _unlike(lay, first, req))]
    if unlike:
        r, why = unlike[0]
        kinds = Counter(g.name for _, g in r.gpus)
        names = ", ".join(f"{n} × {name}" for name, n in kinds.items())
        return (
            f"{head}: the GPUs left ({names} on {r.stages[0].host.name}, …) cannot hold it: {why}"
        )
    left = {h: [g for g in gpus if (h, g.index) not in taken] for h, gpus in usable.items()}
    count = sum(len(g) for g in left.values())
    groups = sum(len(g) // tp for g in left.values())
    if count < tp * pp:
        busy = inv.gpu_count - sum(len(g) for g in usable.values())
        also = f" ({busy} more are in use or short of free memory)" if busy else ""
        left_text = f"only {_gpus(count)} usable left" if count else "no usable GPU left"
        return f"{head}: needs {_gpus(tp * pp)}; {left_text}{also}"
    if groups == 0:
        widest = max((len(g) for g in left.values()), default=0)
        return (
            f"{head}: no host has {tp} usable GPUs left for a tensor-parallel group "
            f"(the most left on one host is {widest})"
        )
    return (
        f"{head}: the {_gpus(count)} left form only {groups} tensor-parallel group(s) of {tp} "
        f"GPUs on one host; a replica needs {pp}, one per pipeline stage"
    )


def tight(spec: ModelSpec, req: PlanRequest, chosen: Sequence[Judged]) -> tuple[str, ...]:
    """Margin reasons of the replicas the request needs (all N asked for; with as many as fit,
    the first, which the plan's figures show and a launch starts, the rest being room to
    grow): once per layout (replicas on GPUs alike share one), and the first GPU partly in use
    whose free memory is within the margin."""
    out: list[str] = []
    seen: set[int] = set()
    startup = ""
    for n, (replica, layout, s) in enumerate(chosen if req.replicas else chosen[:1], 1):
        if id(layout) not in seen:
            seen.add(id(layout))
            found = layout_tight(spec, s, layout, requests=req.concurrency or 1)
            out += [text if n == 1 else f"replica {n}: {text}" for text in found]
        if not startup and any(g.free_bytes < g.total_bytes for _, g in replica.gpus):
            startup = startup_tight(s, layout, replica.gpus)
    return (*out, startup) if startup else tuple(out)


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"

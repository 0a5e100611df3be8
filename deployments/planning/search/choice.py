"""Which plan an operator would choose: the request's context and concurrency are requirements.

Tiers first: a layout that serves the asked context with the asked concurrency (or, when none
was asked, with room for ``MIN_HEADROOM`` full-length requests) beats one that holds fewer, and
both beat one that must clip the context, as vLLM itself refuses to start at a length that does
not fit. Within a tier, a layout that fits only within the planner's error band ("tight",
margin.py) comes after one with room to spare; then the best interconnect, then fewer pipeline stages (vLLM's guidance:
tensor parallel inside a host, pipeline stages across hosts or where TP would cross PCIe), then
fewer GPUs per replica (``balanced``) or more replicas (``throughput``), then more KV cache.
Of the layouts that fit nowhere, those that place more of the replicas asked for come first.
"""

from __future__ import annotations

from .plans import Plan
from .request import PlanRequest

# Below two full-length requests at once, one long prompt makes every other request wait.
MIN_HEADROOM = 2.0
SERVES, LITTLE_HEADROOM, SHORT_OF_CONCURRENCY, CLIPPED, DOES_NOT_FIT = range(5)
RankKey = tuple[float, ...]


def tier(p: Plan, req: PlanRequest) -> int:
    """How well the layout meets the request (lower is better)."""
    if not p.fits:
        return DOES_NOT_FIT
    if p.context_clipped:
        return CLIPPED
    if req.concurrency is not None:
        return SERVES if p.max_concurrency >= req.concurrency else SHORT_OF_CONCURRENCY
    little = p.max_concurrency < MIN_HEADROOM
    return LITTLE_HEADROOM if little and req.goal != "throughput" else SERVES


def rank_key(p: Plan, req: PlanRequest, forced: tuple[int, int] | None) -> RankKey:
    """Sort key, best first; a forced TP × PP leads whatever its verdict."""
    pinned = 0 if (p.tensor_parallel_size, p.pipeline_parallel_size) == forced else 1
    t = tier(p, req)
    link = p.link_rank + 6 * p.multi_host
    if t == CLIPPED:  # the longest context first: it is the nearest to what was asked
        return (pinned, t, p.tight, -p.max_model_len, p.gpus_per_replica, link)
    if t == SHORT_OF_CONCURRENCY:
        return (pinned, t, p.tight, -p.max_concurrency, p.gpus_per_replica, link)
    if t == DOES_NOT_FIT:
        size = p.gpus_per_replica
        return (pinned, t, -p.replicas, link, p.pipeline_parallel_size, size, -p.kv_cache_tokens)
    size = -p.replicas if req.goal == "throughput" else p.gpus_per_replica
    return (pinned, t, p.tight, link, p.pipeline_parallel_size, size, -p.kv_cache_tokens)


def reason(plans: list[Plan], req: PlanRequest, forced: tuple[int, int] | None) -> str:
    """One sentence: why ``plans[0]``, against the question an operator asks first: why not the
    smallest layout that fits? When no smaller one fits, against the next plan that fits."""
    if not plans:
        return ""
    first = plans[0]
    pinned = (first.tensor_parallel_size, first.pipeline_parallel_size) == forced
    if not first.fits:
        return _no_fit(first, req, pinned)
    if first.context_clipped:
        return _clipped(first)
    others = [p for p in plans[1:] if p.fits]
    smaller = [p for p in others if p.gpus_per_replica < first.gpus_per_replica]
    runner = min(smaller, key=lambda p: p.gpus_per_replica) if smaller else next(iter(others), None)
    if pinned:
        return f"{first.label} is the layout you asked for."
    if runner is None:
        return f"{first.label} is the only layout that fits."
    return _versus(first, runner, req)


def _no_fit(first: Plan, req: PlanRequest, pinned: bool) -> str:
    if pinned and req.replicas and first.replicas:
        return (
            f"{first.label}, the layout you asked for, places {first.replicas} of "
            f"{req.replicas} replicas ({first.reasons[0]})."
        )
    if req.replicas and first.replicas:
        return (
            f"No layout places {req.replicas} replicas on these GPUs; {first.label} places "
            f"{first.replicas} ({first.reasons[0]})."
        )
    return "No layout fits on these GPUs."


def _clipped(p: Plan) -> str:
    return (
        f"No layout on these GPUs serves the {p.requested_max_model_len:,}-token context; "
        f"{p.label} serves at most {p.max_model_len:,} tokens. Set a shorter context or plan "
        "on more GPUs."
    )


def _versus(a: Plan, b: Plan, req: PlanRequest) -> str:
    ta, tb = tier(a, req), tier(b, req)
    if ta != tb:
        return _tier_reason(a, b, tb, req)
    if a.tight != b.tight:
        return (
            f"{a.label} fits with room to spare; {b.label} fits only within the planner's "
            f"margin ({b.tight_reasons[0]})."
        )
    if a.link_rank + 6 * a.multi_host != b.link_rank + 6 * b.multi_host:
        where = "runs on one GPU" if a.gpus_per_replica == 1 else f"talks over {_link(a)}"
        return f"{a.label} {where}; {b.label} would talk over {_link(b)}."
    if a.pipeline_parallel_size != b.pipeline_parallel_size:
        return _stages(a, b)
    if req.goal == "throughput" and a.replicas != b.replicas:
        return f"{a.label} leaves room for {a.replicas} replicas; {b.label} for {b.replicas}."
    if a.gpus_per_replica != b.gpus_per_replica:
        return (
            f"{a.label} serves the request on {_gpus(a.gpus_per_replica)} "
            f"({a.max_concurrency:.1f} full-length requests at once); {b.label} needs "
            f"{_gpus(b.gpus_per_replica)}."
        )
    return f"{a.label} has more KV cache than {b.label} ({a.kv_cache_tokens:,} tokens)."


def _tier_reason(a: Plan, b: Plan, tb: int, req: PlanRequest) -> str:
    length = f"{a.max_model_len:,}-token"
    if tb == CLIPPED:
        return (
            f"{a.label} serves the full {length} context; {b.label} would clip it to "
            f"{b.max_model_len:,} tokens."
        )
    if tb == SHORT_OF_CONCURRENCY:
        return (
            f"{a.label} holds {a.max_concurrency:.1f} {length} requests at once (you asked for "
            f"{req.concurrency}); {b.label} only {b.max_concurrency:.1f}."
        )
    return (
        f"{a.label} holds {a.max_concurrency:.1f} {length} requests at once; {b.label} only "
        f"{b.max_concurrency:.1f}, so long prompts would wait for each other."
    )


def _stages(a: Plan, b: Plan) -> str:
    if a.pipeline_parallel_size == 1:
        return (
            f"{a.label} splits the model by tensor parallel inside the host; {b.label} would "
            f"run {b.pipeline_parallel_size} pipeline stages, which only pay off across hosts."
        )
    return (
        f"{a.label} needs {a.pipeline_parallel_size} pipeline stages; {b.label} would run "
        f"{b.pipeline_parallel_size}, with more hand-offs per token."
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _link(p: Plan) -> str:
    if p.multi_host:
        return "the network between hosts"
    return "NVLink" if p.link_rank == 0 else "PCIe or the CPU interconnect"

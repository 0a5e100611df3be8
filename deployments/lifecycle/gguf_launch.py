"""A GGUF model on llama.cpp: the launch's plan (lifecycle.placement.llamacpp places it).

The plan is the llama.cpp planner's (one machine, layer split over its free GPUs, every
placement flag explicit); the launch turns it into its snapshot
(`handoff.llamacpp_snapshot.from_llamacpp_plan`) and leases each GPU's bytes from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from deployments import planning
from deployments.catalog.gguf_plan import GgufOptions
from deployments.catalog.gguf_sources import GgufSource, resolve_gguf
from deployments.catalog.registered import host_inventory
from deployments.catalog.sources import LOCAL_PREFIX, ModelSourceError
from deployments.handoff.llamacpp_snapshot import from_llamacpp_plan
from deployments.handoff.snapshot import GpuSlot, PlanSnapshot
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Deployment, GpuLease
from monitoring.models import Host

ASK_A_NUMBER = "llama.cpp replicas: ask for a number (each replica is planned on its own GPUs)."


@dataclass(frozen=True, slots=True)
class GgufLaunch:
    source: GgufSource
    plan: planning.LlamaCppPlan  # the first replica's; every replica runs its command
    gpu_overhead_bytes: int  # the planner's CUDA context per GPU holding layers, leased too
    # Each replica's GPUs (host indices), the first replica's being the plan's own.
    replica_gpus: tuple[tuple[int, ...], ...] = ()


def layout_problem(*, replicas: int | None, hosts: tuple[str, ...]) -> str | None:
    """llama-server runs on one machine (no RPC); each replica is an engine of its own."""
    if hosts:
        return "llama.cpp runs on one host: leave the further hosts empty."
    if replicas is None:
        return ASK_A_NUMBER
    return None


def hub_token_for(model_ref: str, token: str | None) -> str | None:
    """The launcher's token where the host fetches a Hub quantization; a local file: none."""
    return None if model_ref.strip().startswith(LOCAL_PREFIX) else (token or "").strip() or None


def plan_gguf(
    *,
    host: Host,
    model_ref: str,
    plan_request: planning.PlanRequest,
    gpu_indices: tuple[int, ...] | None,
    options: GgufOptions | None = None,
    replicas: int = 1,
    hub_token: str | None = None,
) -> GgufLaunch:
    """The best llama.cpp plan of a GGUF (a local file, or a Hub repo's quantization that the
    host fetches alone before the engine starts) on the host's free GPUs. `options`: the plan
    panel's llama.cpp settings (split mode, pinned -ts...); without them, the launch's -c and
    -np. A simulated host runs llama-server on the CPU (-ngl 0, engine_control): its plan takes
    one simulated GPU, the lease standing for the engine on the simulated GPU graphs as the
    CPU engines' do."""
    try:
        source, spec = resolve_gguf(model_ref, token=hub_token)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    if not source.is_local:
        # the row's model id names the repo and the file: the host fetches that file alone
        source = replace(source, engine_model=f"{source.repo_id}/{source.engine_model}")
    request = (
        options.request()
        if options is not None
        else planning.LlamaCppRequest(settings=_settings(plan_request))
    )
    if replicas == 1:
        plan = _best(host, spec, request, set(gpu_indices) if gpu_indices else None)
        return GgufLaunch(source, plan, request.gpu_overhead_bytes, (_indices(plan),))
    plans = [
        _best(host, spec, request, set(group), exact=True)
        for group in replica_groups(host, gpu_indices, replicas)
    ]
    if problem := _unlike(plans):
        raise DeploymentError(problem)
    groups = tuple(_indices(p) for p in plans)
    return GgufLaunch(source, plans[0], request.gpu_overhead_bytes, groups)


def _best(
    host: Host,
    spec: planning.GgufSpec,
    request: planning.LlamaCppRequest,
    only: set[int] | None,
    *,
    exact: bool = False,
) -> planning.LlamaCppPlan:
    """The best fitting plan on these GPUs (`exact`: on all of them, a replica's group)."""
    try:
        plans = planning.plan_llamacpp(spec, host_inventory(host, only_indices=only), request)
    except planning.PlanningError as exc:
        raise DeploymentError(str(exc)) from exc
    fitting = [
        p
        for p in plans
        if p.fits
        and (not host.simulated or len(p.gpus) == 1)
        and (not exact or only is None or len(p.gpus) == len(only))
    ]
    if not fitting:
        where = f" on GPU {', '.join(map(str, sorted(only)))}" if exact and only else ""
        raise DeploymentError(f"This plan does not fit{where}: " + "; ".join(plans[0].reasons))
    return fitting[0]


def replica_groups(
    host: Host, gpu_indices: tuple[int, ...] | None, replicas: int
) -> list[tuple[int, ...]]:
    """The host's free GPUs in `replicas` equal runs, in index order: one GPU each on a
    simulated host (llama-server on the CPU, one simulated GPU leased per engine)."""
    inventory = host_inventory(host, only_indices=set(gpu_indices) if gpu_indices else None)
    free = [g.index for g in inventory.hosts[0].gpus if not g.busy]
    size = 1 if host.simulated else len(free) // replicas
    if size == 0 or len(free) < size * replicas:
        raise DeploymentError(
            f"{replicas} llama.cpp replicas need a GPU each at least; {host.name} has "
            f"{len(free)} free. Ask for fewer replicas."
        )
    return [tuple(free[k * size : (k + 1) * size]) for k in range(replicas)]


def _unlike(plans: list[planning.LlamaCppPlan]) -> str | None:
    """Every replica runs the first one's command: a group whose plan differs (GPUs of
    other sizes, another -ts) is refused rather than launched with the wrong split."""
    first = plans[0]
    for k, p in enumerate(plans[1:], start=2):
        same = (p.tensor_split, p.gpu_layers, p.split_mode, p.context_cells) == (
            first.tensor_split,
            first.gpu_layers,
            first.split_mode,
            first.context_cells,
        )
        if not same or [d.total_bytes for d in p.devices] != [d.total_bytes for d in first.devices]:
            return (
                f"Replica {k} would need another llama.cpp command on GPU "
                f"{', '.join(str(g.index) for g in p.gpus)} (its GPUs differ from replica 1's): "
                "ask for fewer replicas, or name GPUs of one size."
            )
    return None


def _indices(plan: planning.LlamaCppPlan) -> tuple[int, ...]:
    return tuple(g.index for g in plan.gpus)


def snapshot(gguf: GgufLaunch, overrides: Mapping[str, Any]) -> PlanSnapshot:
    """The first replica's plan, with every replica's GPUs (each row keeps its own)."""
    first = from_llamacpp_plan(
        gguf.plan,
        gpu_overhead_bytes=gguf.gpu_overhead_bytes,
        model_ref=gguf.source.ref,
        request=overrides,
    )
    count = len(gguf.replica_gpus) or 1
    slots = [[GpuSlot("", i) for i in group] for group in gguf.replica_gpus] or first.gpus
    return replace(first.with_gpus(slots), replicas=count, replicas_asked=count)


def _settings(plan_request: planning.PlanRequest) -> planning.LlamaCppSettings:
    """The launch's -c and -np; the cache types follow a quantized KV dtype asked for."""
    kv = plan_request.kv_cache_dtype
    cache = kv if kv in ("q8_0", "q4_0") else "f16"
    return planning.LlamaCppSettings(
        context_tokens=plan_request.max_model_len or 0,
        slots=plan_request.max_num_seqs or 1,
        cache_type_k=cache,
        cache_type_v=cache,
    )


def more_replicas(first: Deployment, host: Host, adding: int) -> list[tuple[int, ...]]:
    """GPUs for `adding` more replicas of a running llama.cpp deployment: each a group of as
    many GPUs as the first replica's, none of them one its replicas hold, planned with the
    first one's settings and -ts pinned, and leasing exactly its bytes (every replica runs
    its command)."""
    snap, held = first.snapshot, _held(first)
    size = len(snap.gpus[0]) if snap.gpus else 1
    inventory = host_inventory(host)
    free = [g.index for g in inventory.hosts[0].gpus if g.index not in held]
    if len(free) < size * adding:
        raise DeploymentError(
            f"Cannot add {adding} replica(s) to {first.name}: each needs {size} GPU(s) of "
            f"{host.name} that its replicas do not hold, and {len(free)} are left."
        )
    try:
        spec = resolve_gguf(snap.model_ref or first.model_id)[1]
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    request = settings_of(first, split=True).request()
    wanted = [g.total_bytes for g in snap.per_gpu]
    groups = [tuple(free[k * size : (k + 1) * size]) for k in range(adding)]
    for group in groups:
        plan = _best(host, spec, request, set(group), exact=True)
        got = [
            d.total_bytes + (request.gpu_overhead_bytes if d.layers else 0) for d in plan.devices
        ]
        if got != wanted:
            raise DeploymentError(
                f"The GPUs {', '.join(map(str, group))} of {host.name} would not run "
                f"{first.name}'s command as it is (its memory per GPU differs there); stop it "
                "and launch it again with more replicas."
            )
    return groups


def _held(first: Deployment) -> set[int]:
    """The GPU indices the deployment's live replicas lease on its host."""
    leases = GpuLease.objects.filter(
        deployment__in=first.group(), active=True, gpu__host=first.host
    ).values_list("gpu__index", flat=True)
    return set(leases)


def settings_of(first: Deployment, *, split: bool) -> GgufOptions:
    """The llama.cpp settings a deployment was launched with (a scale-up's and a relaunch's);
    `split`: its -ts too, for GPUs as many as its own."""
    snap = first.snapshot
    e = snap.engine_args
    return GgufOptions(
        context_tokens=snap.requested_max_model_len,
        slots=e.n_parallel or 1,
        cache_type_k=e.cache_type_k or "f16",
        cache_type_v=e.cache_type_v or "f16",
        flash_attn=e.flash_attn != "off",
        split_mode=e.split_mode if e.split_mode in ("layer", "row") else "layer",
        tensor_split=(e.tensor_split or None) if split else None,
    )

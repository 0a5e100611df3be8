"""A GGUF model on llama.cpp: which engine a reference may run on, and the launch's plan.

llama-server loads only GGUF files and no other engine here loads them, so the pair is checked
before anything is read or written. The plan is the llama.cpp planner's (one machine, layer
split over its free GPUs, every placement flag explicit); the launch turns it into its
snapshot (`handoff.snapshot.from_llamacpp_plan`) and leases each GPU's bytes from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from deployments import planning
from deployments.catalog.gguf_plan import GgufOptions
from deployments.catalog.gguf_sources import GgufSource, is_gguf_ref, resolve_gguf
from deployments.catalog.registered import host_inventory
from deployments.catalog.sources import ModelSourceError
from deployments.handoff.snapshot import PlanSnapshot, from_llamacpp_plan
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Engine
from monitoring.models import Host

LAUNCHABLE_ENGINES = (Engine.VLLM, Engine.TRANSFORMERS, Engine.LLAMACPP)
ONE_REPLICA = "llama.cpp deployments have one replica for now: ask for 1."


@dataclass(frozen=True, slots=True)
class GgufLaunch:
    source: GgufSource
    plan: planning.LlamaCppPlan
    gpu_overhead_bytes: int  # the planner's CUDA context per GPU holding layers, leased too


def engine_problem(engine: str, model_ref: str) -> str | None:
    """Why this engine cannot load this model, or None."""
    if engine not in LAUNCHABLE_ENGINES:
        return f"Unknown engine {engine!r}; choose vllm, transformers or llamacpp."
    gguf = is_gguf_ref(model_ref)
    if engine == Engine.LLAMACPP and not gguf:
        return (
            f"{model_ref!r} is not a GGUF model; llama.cpp loads GGUF files only. Give a "
            "local:<root>/<path>.gguf file or a Hub GGUF repo with its quantization "
            "(org/Model-GGUF:Q4_K_M), or launch this model on vllm or transformers."
        )
    if engine != Engine.LLAMACPP and gguf:
        return (
            f"{model_ref!r} is a GGUF model; {engine} does not load GGUF files here. "
            "Launch it on llamacpp."
        )
    return None


def layout_problem(*, replicas: int | None, hosts: tuple[str, ...]) -> str | None:
    """llama-server runs on one machine (no RPC) as one engine per deployment for now."""
    if hosts:
        return "llama.cpp runs on one host: leave the further hosts empty."
    if replicas != 1:
        return ONE_REPLICA
    return None


def plan_gguf(
    *,
    host: Host,
    model_ref: str,
    plan_request: planning.PlanRequest,
    gpu_indices: tuple[int, ...] | None,
    options: GgufOptions | None = None,
) -> GgufLaunch:
    """The best llama.cpp plan of a GGUF (a local file, or a Hub repo's quantization that the
    host fetches alone before the engine starts) on the host's free GPUs. `options`: the plan
    panel's llama.cpp settings (split mode, pinned -ts...); without them, the launch's -c and
    -np. A simulated host runs llama-server on the CPU (-ngl 0, engine_control): its plan takes
    one simulated GPU, the lease standing for the engine on the simulated GPU graphs as the
    CPU engines' do."""
    try:
        source, spec = resolve_gguf(model_ref)
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
    only = set(gpu_indices) if gpu_indices else None
    try:
        plans = planning.plan_llamacpp(spec, host_inventory(host, only_indices=only), request)
    except planning.PlanningError as exc:
        raise DeploymentError(str(exc)) from exc
    fitting = [p for p in plans if p.fits and (not host.simulated or len(p.gpus) == 1)]
    if not fitting:
        raise DeploymentError("This plan does not fit: " + "; ".join(plans[0].reasons))
    return GgufLaunch(source, fitting[0], request.gpu_overhead_bytes)


def snapshot(gguf: GgufLaunch, overrides: Mapping[str, Any]) -> PlanSnapshot:
    return from_llamacpp_plan(
        gguf.plan,
        gpu_overhead_bytes=gguf.gpu_overhead_bytes,
        model_ref=gguf.source.ref,
        request=overrides,
    )


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

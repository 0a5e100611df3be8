"""vLLM's placement (and transformers serve's, which takes vLLM's sizing): the planner on the
host's free devices, a simulated host's engines on its CPU.

One sizing for both engines: the planner's plan is what the launch leases; the snapshot
carries its settings (transformers serve takes only those the user asked for:
host.engine_control). Only vLLM runs one model over several hosts (Ray), and only vLLM serves
embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from deployments import planning
from deployments.catalog.corrections import fleet_corrections
from deployments.catalog.registered import host_inventory, planner_host
from deployments.catalog.sources import ModelSource, ModelSourceError, load_spec, resolve_source
from deployments.engines import platforms
from deployments.handoff.snapshot import GpuSlot, from_plan
from deployments.lifecycle import cpu_hub
from deployments.lifecycle.checks import online_host
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.placement.request import LaunchRequest, Placed
from deployments.lifecycle.spanning import cpu_ray_refusal, spanned_hosts
from deployments.models import Deployment, Engine
from monitoring.models import Host


def choose_plan(
    source: ModelSource, host: Host, request: LaunchRequest, hub_token: str | None = None
) -> tuple[planning.Plan, planning.ModelSpec]:
    """The planner's best plan of `source` on the host's free GPUs (and the further hosts'),
    or the refusal saying why none fits."""
    try:
        spec = load_spec(source, token=hub_token)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    only = set(request.gpu_indices) if request.gpu_indices else None
    inventory = host_inventory(host, only_indices=only)
    if problem := _device_problem(request, host, inventory):
        raise DeploymentError(problem)
    if request.hosts:
        others = [planner_host(online_host(name)) for name in request.hosts]
        inventory = planning.Inventory((*inventory.hosts, *others))
    plan_request = replace(
        request.plan_request,
        model=source.engine_model,
        revision=source.revision,
        replicas=request.replicas,
        corrections=fleet_corrections(),
    )
    try:
        result = planning.plan(spec, inventory, plan_request)
    except planning.PlanningError as exc:
        raise DeploymentError(str(exc)) from exc
    if not result.plans:
        raise DeploymentError(
            f"No layout of this model fits the free {_devices(plan_request)} of this host."
        )
    best = result.plans[0]
    _check_fits(best, host, plan_request, inventory)
    return best, spec


def _devices(request: planning.PlanRequest) -> str:
    return "RAM of the CPU" if request.device == platforms.CPU else "GPUs"


def _device_problem(
    request: LaunchRequest, host: Host, inventory: planning.Inventory
) -> str | None:
    """The CPU device asked for where there is none, or across hosts."""
    if request.plan_request.device != platforms.CPU:
        return None
    if inventory.hosts[0].cpu is None:
        return (
            f"{host.name} offers no CPU device to plan on: its worker registers none "
            "(SHARDBOARD_CPU_DEVICE is off there, or the worker predates the CPU device). "
            "Launch on its GPUs."
        )
    if request.hosts:
        return (
            'vLLM on the CPU runs on one host (its CPU platform refuses Ray: "current '
            'platform cpu does not support ray"): leave the further hosts empty.'
        )
    if request.gpu_indices:
        return "The CPU device takes no GPUs: leave the GPUs empty."
    return None


def _check_fits(
    best: planning.Plan, host: Host, request: planning.PlanRequest, inventory: planning.Inventory
) -> None:
    asked = best.replicas_asked
    if not best.fits and asked and 0 < best.replicas < asked:
        raise DeploymentError(
            f"The free {_devices(request)} of {host.name} hold {best.replicas} of the {asked} "
            f"replicas asked for ({best.reasons[0]}); ask for fewer, or for max."
        )
    if not best.fits:
        raise DeploymentError("This plan does not fit: " + "; ".join(best.reasons))
    wanted = request.concurrency
    if wanted is not None and best.max_concurrency < wanted and not best.context_clipped:
        raise DeploymentError(
            f"The free memory of {host.name} holds {best.max_concurrency:.1f} requests of "
            f"{best.max_model_len:,} tokens at once, not the {wanted} asked for: "
            + " ".join(planning.share_lines(best, inventory, request))
        )


class VllmPlacement:
    """vLLM on the host's GPUs (on simulated ones its CPU build runs on the CPU in their place,
    with the GPU plan's leases) or on its CPU device (``PlanRequest.device`` "cpu": the CPU
    planner's ranks, KV space and core binding, RAM leased on the CPU row). One sizing: the
    planner's, for both."""

    engine = str(Engine.VLLM)

    def refusal(self, request: LaunchRequest) -> str | None:
        return None

    def place(
        self,
        host: Host,
        request: LaunchRequest,
        *,
        hub_token: str | None,
        overrides: Mapping[str, Any],
    ) -> Placed:
        source = resolve(request.model_ref, request.revision)
        token = None if source.is_local else (hub_token or "").strip() or None
        plan = _plan(source, host, request, token)
        snapshot = from_plan(plan, model_ref=source.ref, request=overrides)
        placed = Placed(self.engine, source, spanned_hosts(snapshot, host)[0], snapshot, token)
        if problem := self.placed_refusal(placed):
            raise DeploymentError(problem)
        return placed

    def placed_refusal(self, placed: Placed) -> str | None:
        """Why this engine cannot run the plan the planner made, or None."""
        return cpu_ray_refusal(placed.snapshot, placed.lead)

    def more(self, first: Deployment, host: Host, adding: int) -> list[list[GpuSlot]]:
        """The devices of `adding` more replicas of `first`'s layout, each reserving the first
        one's bytes (every replica runs its command), or a refusal saying how many fit."""
        source = resolve(first.snapshot.model_ref or first.model_id, first.revision)
        snapshot = first.snapshot
        pinned = {
            k: v
            for k, v in snapshot.request.items()
            if k in planning.PlanRequest.__dataclass_fields__
            and k not in ("replicas", "concurrency")
        }
        pinned |= {
            "tensor_parallel_size": snapshot.engine_args.tensor_parallel_size,
            "pipeline_parallel_size": snapshot.engine_args.pipeline_parallel_size,
            "max_model_len": snapshot.engine_args.max_model_len,
        }
        request = LaunchRequest(
            name=first.name,
            model_ref=source.ref,
            host_name=host.name,
            engine=first.engine,
            revision=first.revision,
            plan_request=planning.PlanRequest(**pinned),
            replicas=adding,
        )
        try:
            plan, _ = choose_plan(source, host, request)
        except DeploymentError as exc:
            raise DeploymentError(f"Cannot add {adding} replica(s) to {first.name}: {exc}") from exc
        if [m.total_bytes for m in plan.per_gpu] != [g.total_bytes for g in snapshot.per_gpu]:
            raise DeploymentError(
                f"The free {_devices(request.plan_request)} of {host.name} would not run "
                f"{first.name}'s command as it is (its memory per device differs there); stop "
                "it and launch it again with more replicas."
            )
        return [[GpuSlot(g.host, g.index) for g in plan.gpus[k]] for k in range(adding)]

    def relaunch_fields(self, first: Deployment) -> dict[str, Any]:
        return {}


class TransformersPlacement(VllmPlacement):
    """transformers serve, leasing what vLLM's plan of the model would: one host, no pooling
    runner (transformers 5.23's server routes no /v1/embeddings: cli/serving/server.py)."""

    engine = str(Engine.TRANSFORMERS)

    def refusal(self, request: LaunchRequest) -> str | None:
        return cpu_device_refusal(request, "transformers serve")

    def placed_refusal(self, placed: Placed) -> str | None:
        if placed.spans_hosts:
            return (
                "This plan spans several hosts, which only vLLM does (on Ray); transformers "
                "runs on one host. Launch it on vllm, or leave the further hosts empty."
            )
        if placed.snapshot.embeds:
            return (
                f"{placed.source.ref} is an embedding model: transformers serve cannot serve it "
                "(it has no /v1/embeddings route). Launch it on vllm."
            )
        return None


def cpu_device_refusal(request: LaunchRequest, engine: str) -> str | None:
    """The CPU device is planned for vLLM's CPU build only."""
    if request.plan_request.device != platforms.CPU:
        return None
    return (
        f"The CPU device is planned for vLLM (its CPU build); {engine} runs on a host's GPUs, "
        "or on the CPU of a host whose GPUs are simulated. Launch on vllm, or on the GPUs."
    )


def resolve(ref: str, revision: str = "") -> ModelSource:
    try:
        return resolve_source(ref, revision)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc


def _plan(
    source: ModelSource, host: Host, request: LaunchRequest, hub_token: str | None
) -> planning.Plan:
    """A simulated host's engines run on its CPU, after its worker downloads a Hub model:
    sensible for small ones only (cpu_hub)."""
    on_cpu = request.plan_request.device == platforms.CPU  # sized from the RAM: no cap
    if on_cpu or not (host.simulated and not source.is_local):
        return choose_plan(source, host, request, hub_token)[0]
    try:
        plan = choose_plan(source, host, request, hub_token)[0]
    except DeploymentError as exc:
        raise DeploymentError(
            f"{cpu_hub.SIMULATED_HUB} This one could not be planned: {exc}"
        ) from exc
    if refusal := cpu_hub.refusal(plan):
        raise DeploymentError(refusal)
    return plan

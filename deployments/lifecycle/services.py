"""The write path for deployments: create (plan, lease, audit, enqueue) and stop.

Each service is one transaction that writes the audit row with the change; the Celery task is
sent on commit, so a worker never sees a row that might still roll back.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from controlpanel.roles import Role, has_role
from deployments import events, planning, sealed
from deployments.catalog.registered import host_inventory
from deployments.catalog.sources import ModelSource, ModelSourceError, load_spec, resolve_source
from deployments.lifecycle import limits
from deployments.models import ACTIVE, Deployment, Engine, GpuLease, Status
from monitoring.models import Gpu, Host


class DeploymentError(Exception):
    """Refused before anything started; the message says why and what to change."""


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    name: str
    model_ref: str
    host_name: str
    engine: str = Engine.VLLM
    revision: str = ""
    plan_request: planning.PlanRequest = field(default_factory=planning.PlanRequest)
    gpu_indices: tuple[int, ...] | None = None
    auto_restart: bool | None = None  # None: the server's SHARDBOARD_AUTO_RESTART


def _require(user: Any, role: Role) -> None:
    if not has_role(user, role):
        raise DeploymentError(f"Your role does not allow this: it needs {role.label}.")


def _host(name: str) -> Host:
    host = Host.objects.filter(name=name).first()
    if host is None:
        raise DeploymentError(f"Unknown host {name!r}: no host worker of that name has registered.")
    if not host.is_online():
        raise DeploymentError(
            f"Host {name!r} is offline (no heartbeat lately); start its host worker."
        )
    return host


def choose_plan(
    source: ModelSource, host: Host, request: LaunchRequest, hub_token: str | None = None
) -> tuple[planning.Plan, planning.ModelSpec]:
    try:
        spec = load_spec(source, token=hub_token)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    only = set(request.gpu_indices) if request.gpu_indices else None
    inventory = host_inventory(host, only_indices=only)
    plan_request = replace(
        request.plan_request, model=source.engine_model, revision=source.revision
    )
    try:
        result = planning.plan(spec, inventory, plan_request)
    except planning.PlanningError as exc:
        raise DeploymentError(str(exc)) from exc
    if not result.plans:
        raise DeploymentError("No layout of this model fits the free GPUs of this host.")
    best = result.plans[0]
    if not best.fits:
        raise DeploymentError("This plan does not fit: " + "; ".join(best.reasons))
    return best, spec


def _engine_for(request: LaunchRequest, host: Host, source: ModelSource) -> str:
    if request.engine not in Engine.values:
        raise DeploymentError(f"Unknown engine {request.engine!r}; choose vllm or transformers.")
    if host.simulated:
        if not source.is_local:
            raise DeploymentError(
                "This host's GPUs are simulated: it serves local models only, with transformers "
                "on the CPU. Pick a local model (such as the demo model) or a real GPU host."
            )
        return Engine.TRANSFORMERS
    return request.engine


def _lease(deployment: Deployment, host: Host, plan: planning.Plan) -> None:
    replica = plan.gpus[0]
    gpus = {g.index: g for g in Gpu.objects.filter(host=host, index__in=[r.index for r in replica])}
    try:
        with transaction.atomic():
            for ref, mem in zip(replica, plan.per_gpu, strict=True):
                GpuLease.objects.create(
                    deployment=deployment, gpu=gpus[ref.index], memory_bytes=mem.total_bytes
                )
    except IntegrityError:
        taken = sorted(
            GpuLease.objects.filter(gpu__in=gpus.values(), active=True).values_list(
                "gpu__index", flat=True
            )
        )
        raise DeploymentError(
            f"GPU {', '.join(map(str, taken)) or '?'} on {host.name} was just leased by another "
            "deployment. Plan again to pick free GPUs."
        ) from None


def _check_name(name: str) -> str:
    name = name.strip().lower()
    if problem := limits.name_problem(name):
        raise DeploymentError(problem)
    if Deployment.objects.filter(name=name, status__in=list(ACTIVE)).exists():
        raise DeploymentError(f"A deployment named {name!r} is already active.")
    return name


def deployment_create(
    *,
    user: Any,
    request: LaunchRequest,
    http_request: HttpRequest | None = None,
    hub_token: str | None = None,
) -> Deployment:
    """Plan again, lease, audit, enqueue. `hub_token`: the launcher's own, for gated models."""
    _require(user, Role.OPERATOR)
    name = _check_name(request.name)
    host = _host(request.host_name)
    try:
        source = resolve_source(request.model_ref, request.revision)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    engine = _engine_for(request, host, source)
    hub_token = None if source.is_local else (hub_token or "").strip() or None
    plan, _ = choose_plan(source, host, request, hub_token)
    overrides = {
        k: v
        for k, v in asdict(request.plan_request).items()
        if v is not None and k not in ("model", "revision")  # both are columns of the row
    }
    auto_restart = (
        settings.SHARDBOARD_AUTO_RESTART if request.auto_restart is None else request.auto_restart
    )
    options = {"overrides": overrides, "auto_restart": bool(auto_restart), "hub_token": hub_token}
    return _create(user, name, host, source, engine, plan, options, http_request)


@transaction.atomic
def _create(
    user: Any,
    name: str,
    host: Host,
    source: ModelSource,
    engine: str,
    plan: planning.Plan,
    options: dict[str, Any],
    http_request: HttpRequest | None,
) -> Deployment:
    snapshot = planning.plan_details(plan)
    try:
        with transaction.atomic():
            deployment = Deployment.objects.create(
                name=name,
                model_id=source.engine_model,
                revision=source.revision,
                engine=engine,
                host=host,
                plan={**snapshot, "model_ref": source.ref, "request": options["overrides"]},
                auto_restart=options["auto_restart"],
                hub_token_sealed=sealed.seal(options["hub_token"] or ""),
                created_by=user,
            )
    except IntegrityError:
        raise DeploymentError(f"A deployment named {name!r} is already active.") from None
    _lease(deployment, host, plan)
    key = deployment.engine_api_key()
    deployment.api_key_hash = hashlib.sha256(key.encode()).hexdigest()
    deployment.save(update_fields=["api_key_hash"])
    deployment.events.create(new_status=Status.PENDING, reason=f"created by {user.get_username()}")
    audit_record(
        actor=user,
        action="deployment.create",
        target_type="deployment",
        target_id=deployment.pk,
        request=http_request,
        detail={
            "name": name,
            "model": source.ref,
            "engine": engine,
            "host": host.name,
            "gpus": [g["index"] for g in snapshot["gpus"][0]],
            "planned_command": snapshot["command"],
            "tensor_parallel_size": plan.tensor_parallel_size,
            "pipeline_parallel_size": plan.pipeline_parallel_size,
            "auto_restart": options["auto_restart"],
            "hub_token": "the launcher's own" if options["hub_token"] else "none given",
        },
    )
    transaction.on_commit(lambda: _enqueue("deployments.launch", deployment))
    return deployment


def _enqueue(task_name: str, deployment: Deployment) -> None:
    # By name: the web side never imports the host worker's code.
    celery_app.send_task(task_name, args=[deployment.pk], queue=host_queue(deployment.host.name))
    events.publish(deployment)


@transaction.atomic
def deployment_stop(
    *, user: Any, deployment: Deployment, http_request: HttpRequest | None = None
) -> Deployment:
    _require(user, Role.OPERATOR)
    deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
    if deployment.status in (Status.STOPPING, Status.STOPPED, Status.FAILED):
        raise DeploymentError(
            f"{deployment.name} is already {deployment.get_status_display().lower()}."
        )
    deployment.transition(Status.STOPPING, reason=f"stop requested by {user.get_username()}")
    audit_record(
        actor=user,
        action="deployment.stop",
        target_type="deployment",
        target_id=deployment.pk,
        request=http_request,
        detail={"name": deployment.name, "host": deployment.host.name},
    )
    transaction.on_commit(lambda: _enqueue("deployments.stop", deployment))
    return deployment


def deployment_relaunch(
    *,
    user: Any,
    deployment: Deployment,
    http_request: HttpRequest | None = None,
    hub_token: str | None = None,
) -> Deployment:
    """A new deployment with the same model, host and plan settings (the old one must be ended)."""
    if deployment.is_active:
        raise DeploymentError(f"Stop {deployment.name} first; a restart launches it anew.")
    plan = deployment.plan
    request = LaunchRequest(
        name=deployment.name,
        model_ref=plan.get("model_ref", deployment.model_id),
        host_name=deployment.host.name,
        engine=deployment.engine,
        revision=deployment.revision,
        plan_request=planning.PlanRequest(**plan.get("request", {})),
        auto_restart=deployment.auto_restart,
    )
    return deployment_create(
        user=user, request=request, http_request=http_request, hub_token=hub_token
    )

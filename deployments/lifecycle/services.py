"""The write path for deployments: create (plan, lease, audit, enqueue) and stop.

Each service is one transaction that writes the audit row with the change; the Celery task is
sent on commit, so a worker never sees a row that might still roll back.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role, has_role
from deployments import planning, replicas, sealed
from deployments.catalog.registered import host_inventory, reserved_bytes
from deployments.catalog.sources import ModelSource, ModelSourceError, load_spec, resolve_source
from deployments.lifecycle import cpu_hub, limits
from deployments.lifecycle.dispatch import enqueue as _enqueue
from deployments.models import ACTIVE, Deployment, Engine, GpuLease, Status
from deployments.planning.units import GIB
from monitoring.models import Gpu, Host

# A launch that lost the race for a GPU's memory plans again on what is left, this often.
RESERVE_ATTEMPTS = 3


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
    # Replicas of the layout, each its own engine on its own GPUs; None: as many as fit.
    # The planner's ``plan_request.replicas`` is ignored: this field decides.
    replicas: int | None = 1


def require_role(user: Any, role: Role) -> None:
    if not has_role(user, role):
        raise DeploymentError(f"Your role does not allow this: it needs {role.label}.")


def online_host(name: str) -> Host:
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
        request.plan_request,
        model=source.engine_model,
        revision=source.revision,
        replicas=request.replicas,
    )
    try:
        result = planning.plan(spec, inventory, plan_request)
    except planning.PlanningError as exc:
        raise DeploymentError(str(exc)) from exc
    if not result.plans:
        raise DeploymentError("No layout of this model fits the free GPUs of this host.")
    best = result.plans[0]
    asked = best.replicas_asked
    if not best.fits and asked and 0 < best.replicas < asked:
        raise DeploymentError(
            f"The free GPUs of {host.name} hold {best.replicas} of the {asked} replicas asked "
            f"for ({best.reasons[0]}); ask for fewer, or for max."
        )
    if not best.fits:
        raise DeploymentError("This plan does not fit: " + "; ".join(best.reasons))
    wanted = plan_request.concurrency
    if wanted is not None and best.max_concurrency < wanted and not best.context_clipped:
        raise DeploymentError(
            f"The free memory of {host.name} holds {best.max_concurrency:.1f} requests of "
            f"{best.max_model_len:,} tokens at once, not the {wanted} asked for: "
            + " ".join(planning.share_lines(best, inventory, plan_request))
        )
    return best, spec


def _engine_for(request: LaunchRequest, host: Host, source: ModelSource) -> str:
    if request.engine not in Engine.values:
        raise DeploymentError(f"Unknown engine {request.engine!r}; choose vllm or transformers.")
    if host.simulated:
        return Engine.TRANSFORMERS  # on the CPU; a Hub model only if small (cpu_hub)
    return request.engine


def _plan_for(
    source: ModelSource, host: Host, request: LaunchRequest, hub_token: str | None
) -> planning.Plan:
    if not (host.simulated and not source.is_local):
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


class ReservationConflict(DeploymentError):
    """Another launch reserved the memory this plan counted on, after it was made."""


def reserve_gpus(rows: list[Deployment], host: Host, plan: planning.Plan) -> None:
    """Reserve the plan's bytes on each GPU of every replica (``rows[k]`` runs replica k + 1),
    or refuse if they no longer fit.

    The GPU rows are locked in primary-key order (no deadlock between launches sharing GPUs)
    before the active reservations are summed, so a concurrent launch waits for this
    transaction and then sees its reservations: no interleaving over-commits a GPU. SQLite
    takes its one write lock at the transaction's first statement (IMMEDIATE), which does
    the same. Every replica runs the first one's command, so each reserves the same bytes.
    """
    per_replica = [
        {ref.index: mem.total_bytes for ref, mem in zip(refs, plan.per_gpu, strict=True)}
        for refs in plan.gpus[: len(rows)]
    ]
    wanted: Counter[int] = Counter()
    for replica in per_replica:
        wanted.update(replica)
    gpus = list(Gpu.objects.select_for_update().filter(host=host, index__in=wanted).order_by("pk"))
    if len(gpus) != len(wanted):
        raise DeploymentError(f"A GPU of this plan is no longer registered on {host.name}.")
    held = reserved_bytes(g.pk for g in gpus)
    for gpu in gpus:
        others = held.get(gpu.pk, 0)
        if others + wanted[gpu.index] > gpu.memory_total_bytes:
            raise ReservationConflict(_over_message(host, gpu, others, wanted[gpu.index]))
    by_index = {gpu.index: gpu for gpu in gpus}
    GpuLease.objects.bulk_create(
        GpuLease(deployment=row, gpu=by_index[index], memory_bytes=size)
        for row, replica in zip(rows, per_replica, strict=True)
        for index, size in replica.items()
    )


def _over_message(host: Host, gpu: Gpu, others: int, wanted: int) -> str:
    free = max(gpu.memory_total_bytes - others, 0)
    return (
        f"GPU {gpu.index} on {host.name} has {free / GIB:.1f} GiB free of "
        f"{gpu.memory_total_bytes / GIB:.0f} GiB after other deployments' reservations; this "
        f"deployment needs {wanted / GIB:.1f} GiB there. Other launches took the memory first: "
        "plan again, on other GPUs or with a smaller load."
    )


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
    require_role(user, Role.OPERATOR)
    name = _check_name(request.name)
    host = online_host(request.host_name)
    try:
        source = resolve_source(request.model_ref, request.revision)
    except ModelSourceError as exc:
        raise DeploymentError(str(exc)) from exc
    engine = _engine_for(request, host, source)
    hub_token = None if source.is_local else (hub_token or "").strip() or None
    overrides: dict[str, Any] = {
        k: v
        for k, v in asdict(request.plan_request).items()
        # model and revision are columns of the row; replicas is the launch's own
        if v is not None and k not in ("model", "revision", "replicas")
    }
    overrides["replicas"] = "max" if request.replicas is None else request.replicas
    auto_restart = (
        settings.SHARDBOARD_AUTO_RESTART if request.auto_restart is None else request.auto_restart
    )
    options = {"overrides": overrides, "auto_restart": bool(auto_restart), "hub_token": hub_token}
    for attempt in range(RESERVE_ATTEMPTS):
        plan = _plan_for(source, host, request, hub_token)
        try:
            return _create(user, name, host, source, engine, plan, options, http_request)
        except ReservationConflict:
            if attempt == RESERVE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


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
    count = max(len(plan.gpus), 1)
    try:
        with transaction.atomic():
            rows = _create_rows(user, name, host, source, engine, snapshot, options, count)
    except IntegrityError:
        raise DeploymentError(f"A deployment named {name!r} is already active.") from None
    reserve_gpus(rows, host, plan)
    for row in rows:
        key = row.engine_api_key()
        row.api_key_hash = hashlib.sha256(key.encode()).hexdigest()
        row.save(update_fields=["api_key_hash"])
        which = f" (replica {row.replica_index} of {count})" if count > 1 else ""
        row.events.create(
            new_status=Status.PENDING, reason=f"created by {user.get_username()}{which}"
        )
    first = rows[0]
    audit_record(
        actor=user,
        action="deployment.create",
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail={
            "name": name,
            "model": source.ref,
            "engine": engine,
            "host": host.name,
            "replicas": count,
            "replicas_asked": options["overrides"].get("replicas", 1),
            "gpus": [g["index"] for g in snapshot["gpus"][0]],
            "replica_gpus": [[g["index"] for g in r] for r in snapshot["gpus"][:count]],
            "replica_ids": [row.pk for row in rows],
            "reserved_bytes": [g["total_bytes"] for g in snapshot["per_gpu"]],
            "planned_command": snapshot["command"],
            "tensor_parallel_size": plan.tensor_parallel_size,
            "pipeline_parallel_size": plan.pipeline_parallel_size,
            "auto_restart": options["auto_restart"],
            "hub_token": "the launcher's own" if options["hub_token"] else "none given",
        },
    )
    for row in rows:
        transaction.on_commit(partial(_enqueue, "deployments.launch", row, [row, first]))
    return first


def _create_rows(
    user: Any,
    name: str,
    host: Host,
    source: ModelSource,
    engine: str,
    snapshot: dict[str, Any],
    options: dict[str, Any],
    count: int,
) -> list[Deployment]:
    """The first replica's row, then one per further replica pointing at it; each row's plan
    names its own GPUs."""
    rows: list[Deployment] = []
    for index in range(1, count + 1):
        gpus = snapshot["gpus"][index - 1 : index]
        rows.append(
            Deployment.objects.create(
                name=name,
                model_id=source.engine_model,
                revision=source.revision,
                engine=engine,
                host=host,
                plan={
                    **snapshot,
                    "gpus": gpus,
                    "model_ref": source.ref,
                    "request": options["overrides"],
                },
                auto_restart=options["auto_restart"],
                hub_token_sealed=sealed.seal(options["hub_token"] or ""),
                created_by=user,
                replica_of=rows[0] if rows else None,
                replica_index=index,
            )
        )
    return rows


@transaction.atomic
def deployment_stop(
    *, user: Any, deployment: Deployment, http_request: HttpRequest | None = None
) -> Deployment:
    """Stop every replica still up (one audit row for them all); returns the first replica.

    A replica already `stopping` gets its stop task sent again: pressing Stop again is how a
    user gets a stop whose message was lost (Redis down) moving without waiting for the
    sweeper; the stop task is a no-op once the row has ended."""
    require_role(user, Role.OPERATOR)
    rows = list(deployment.group().select_for_update().order_by("pk"))
    first = rows[0]
    live = [r for r in rows if r.status not in (Status.STOPPED, Status.FAILED)]
    if not live:
        state = replicas.overall([r.status for r in rows])
        raise DeploymentError(f"{first.name} is already {state.label.lower()}.")
    again = [r.pk for r in live if r.status == Status.STOPPING]
    for row in live:
        if row.status != Status.STOPPING:
            row.transition(Status.STOPPING, reason=f"stop requested by {user.get_username()}")
    audit_record(
        actor=user,
        action="deployment.stop",
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail={
            "name": first.name,
            "host": first.host.name,
            "replicas": len(live),
            "replica_ids": [r.pk for r in live],
            "sent_again": again,
        },
    )
    for row in live:
        transaction.on_commit(partial(_enqueue, "deployments.stop", row, [row, first]))
    return first


def deployment_relaunch(
    *,
    user: Any,
    deployment: Deployment,
    http_request: HttpRequest | None = None,
    hub_token: str | None = None,
) -> Deployment:
    """A new deployment with the same model, host, plan settings and replicas asked for (every
    replica of the old one must have ended)."""
    group = list(deployment.group())
    first = group[0]
    if any(r.is_active for r in group):
        raise DeploymentError(f"Stop {first.name} first; a restart launches it anew.")
    plan = first.plan
    overrides = dict(plan.get("request", {}))
    asked = overrides.pop("replicas", 1)  # launched before replicas: one
    request = LaunchRequest(
        name=first.name,
        model_ref=plan.get("model_ref", first.model_id),
        host_name=first.host.name,
        engine=first.engine,
        revision=first.revision,
        plan_request=planning.PlanRequest(**overrides),
        auto_restart=first.auto_restart,
        replicas=None if asked == "max" else int(asked),
    )
    return deployment_create(
        user=user, request=request, http_request=http_request, hub_token=hub_token
    )

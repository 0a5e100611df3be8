"""The write path for deployments: create (place, lease, audit, enqueue) and stop.

Each service is one transaction that writes the audit row with the change; the Celery task is
sent on commit, so a worker never sees a row that might still roll back. A launch reads the
same whatever the engine: the engine's placement (lifecycle.placement) plans the model on the
host's devices and gives its snapshot; the rows and their leases are written from that.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role
from deployments.engines import platforms
from deployments.handoff import sealed
from deployments.lifecycle import engineprep, launch_policy, placement
from deployments.lifecycle.checks import check_name
from deployments.lifecycle.checks import online_host as online_host
from deployments.lifecycle.checks import require_role as require_role
from deployments.lifecycle.dispatch import enqueue as _enqueue
from deployments.lifecycle.errors import DeploymentError as DeploymentError
from deployments.lifecycle.placement import LaunchRequest as LaunchRequest
from deployments.lifecycle.placement import Placed
from deployments.lifecycle.reservations import ReservationConflict as ReservationConflict
from deployments.lifecycle.reservations import reserve_bytes
from deployments.lifecycle.spanning import check_hosts, ray_nodes, spanned_hosts
from deployments.live import drain
from deployments.models import Deployment, Engine, Status, replicas
from teams import membership

# A launch that lost the race for a GPU's memory plans again on what is left, this often.
RESERVE_ATTEMPTS = 3


def deployment_create(
    *,
    user: Any,
    request: LaunchRequest,
    http_request: HttpRequest | None = None,
    hub_token: str | None = None,
) -> Deployment:
    """Place again, lease, audit, enqueue. `hub_token`: the launcher's own, for gated models."""
    require_role(user, Role.OPERATOR)
    try:
        team = membership.launch_team(user, request.team)
    except membership.TeamError as exc:
        raise DeploymentError(str(exc)) from exc
    name = check_name(request.name)
    placer = placement.for_engine(request.engine, request.model_ref)
    if problem := placer.refusal(request):
        raise DeploymentError(problem)
    if request.plan_request.enable_lora and request.engine != Engine.VLLM:
        raise DeploymentError("LoRA adapters are served by vLLM only: launch it on vllm.")
    host = online_host(request.host_name)
    check_hosts(request.host_name, request.hosts, request.replicas)
    if refused := launch_policy.refusal(
        request.scaling_policy, replicas=request.replicas, hosts=request.hosts
    ):
        raise DeploymentError(refused.message)
    options = _options(request, team)
    for attempt in range(RESERVE_ATTEMPTS):
        placed = placer.place(host, request, hub_token=hub_token, overrides=options["overrides"])
        if problem := engineprep.launch_problem(placed.lead, placed.engine):  # preparing: waits
            raise DeploymentError(problem)
        try:
            return _create(user, name, placed, options, http_request)
        except ReservationConflict:
            if attempt == RESERVE_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def _options(request: LaunchRequest, team: Any) -> dict[str, Any]:
    """What every row of the launch keeps beside its plan; `overrides`: the launch's plan
    settings, which a relaunch plans with again."""
    overrides: dict[str, Any] = {
        k: v
        for k, v in asdict(request.plan_request).items()
        # model and revision are columns of the row; replicas is the launch's own; the
        # corrections are learned again from the fleet's starts at each plan
        if v is not None and k not in ("model", "revision", "replicas", "corrections")
    }
    overrides["replicas"] = "max" if request.replicas is None else request.replicas
    if overrides.get("learned_correction") is True:
        del overrides["learned_correction"]  # the default: kept only when switched off
    auto_restart = (
        settings.SHARDBOARD_AUTO_RESTART if request.auto_restart is None else request.auto_restart
    )
    return {
        "overrides": overrides,
        "auto_restart": bool(auto_restart),
        "team": team,
        "sleep_after_s": request.sleep_after_s,
        "scaling_policy": request.scaling_policy,
    }


@transaction.atomic
def _create(
    user: Any,
    name: str,
    placed: Placed,
    options: dict[str, Any],
    http_request: HttpRequest | None,
) -> Deployment:
    snapshot, host = placed.snapshot, placed.lead
    count = placed.replicas
    try:
        with transaction.atomic():
            rows = _create_rows(user, name, placed, options)
    except IntegrityError:
        raise DeploymentError(f"A deployment named {name!r} is already active.") from None
    reserve_bytes(rows, host, placed.leases())
    if placed.spans_hosts:
        ray_nodes(rows[0], snapshot, host)
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
            "model": placed.source.ref,
            "engine": placed.engine,
            "host": host.name,
            "hosts": [h.name for h in spanned_hosts(snapshot, host)],
            "multi_host": placed.spans_hosts,
            "team": team.name if (team := options.get("team")) else None,
            "replicas": count,
            "replicas_asked": options["overrides"].get("replicas", 1),
            "gpus": list(snapshot.gpu_indices),
            "replica_gpus": [[g.index for g in r] for r in snapshot.gpus[:count]],
            "replica_ids": [row.pk for row in rows],
            "reserved_bytes": [g.total_bytes for g in snapshot.per_gpu],
            "planned_command": list(first.planned_argv),
            "tensor_parallel_size": snapshot.engine_args.tensor_parallel_size,
            "pipeline_parallel_size": snapshot.engine_args.pipeline_parallel_size,
            "auto_restart": options["auto_restart"],
            "sleep_after_s": options["sleep_after_s"],
            "when_idle": platforms.idle_words(placed.engine, first.engine_device),
            "scaling_policy": options["scaling_policy"] is not None,
            "hub_token": "the launcher's own" if placed.hub_token else "none given",
        },
    )
    launch_policy.create(first, options["scaling_policy"], user=user, http_request=http_request)
    for row in rows:
        transaction.on_commit(partial(_enqueue, "deployments.launch", row, [row, first]))
    return first


def _create_rows(user: Any, name: str, placed: Placed, options: dict[str, Any]) -> list[Deployment]:
    """The first replica's row, then one per further replica pointing at it; each row's plan
    snapshot names its own GPUs."""
    rows: list[Deployment] = []
    snapshot = placed.snapshot
    for index in range(1, placed.replicas + 1):
        own = snapshot.with_gpus(snapshot.gpus[index - 1 : index])
        rows.append(
            Deployment.objects.create(
                name=name,
                model_id=placed.source.engine_model,
                revision=placed.source.revision,
                engine=placed.engine,
                host=placed.lead,
                plan=own.to_json(),
                spans_hosts=own.engine_args.spans_hosts,
                auto_restart=options["auto_restart"],
                sleep_after_s=options.get("sleep_after_s"),
                hub_token_sealed=sealed.seal(placed.hub_token or ""),
                created_by=user,
                team=options.get("team"),
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
    if problem := membership.act_problem(user, first.team_id, first.name, "stopping"):
        raise DeploymentError(problem)
    return stop_rows(rows, actor=user, http_request=http_request)


def stop_rows(
    rows: list[Deployment],
    *,
    actor: Any,
    http_request: HttpRequest | None = None,
    why: str = "",
) -> Deployment:
    """Every live replica of `rows` (one deployment's, locked) to `stopping`, one audit row;
    `actor` None is Shardboard itself (a quota), `why` then says why."""
    first = rows[0]
    by = actor.get_username() if actor is not None else why
    live = [r for r in rows if r.status not in (Status.STOPPED, Status.FAILED)]
    if not live:
        state = replicas.overall([r.status for r in rows])
        raise DeploymentError(f"{first.name} is already {state.label.lower()}.")
    again = [r.pk for r in live if r.status == Status.STOPPING]
    for row in live:
        if row.status != Status.STOPPING:
            row.transition(Status.STOPPING, reason=f"stop requested by {by}")
    audit_record(
        actor=actor,
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
            **({"reason": why} if why else {}),
        },
    )
    # Out of the gateway's rotation at once, before the host worker gets the stop and drains.
    transaction.on_commit(partial(drain.drain_begin, [r.pk for r in live]))
    for row in live:
        transaction.on_commit(partial(_enqueue, "deployments.stop", row, [row, first]))
    return first

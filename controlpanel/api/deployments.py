"""Deployments through the API: list, read, launch, stop, scale. Each write calls the service
the UI calls, with the request, so its checks and its audit row are the UI's own."""

from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from ninja import Router, Status

from controlpanel.api.auth import DEPLOY, READ, ApiError, principal
from controlpanel.api.schemas import (
    REFUSALS,
    DeploymentCreateIn,
    DeploymentOut,
    IdleIn,
    Message,
    ScaleIn,
)
from deployments.catalog.selectors import session_hub_token
from deployments.engines import platforms
from deployments.lifecycle import idle, scaling, selectors, services
from deployments.lifecycle.forms import LaunchForm
from deployments.lifecycle.policy import POLICY_FIELDS
from deployments.models import Deployment, RayNode, replicas
from teams import membership

router = Router(tags=["deployments"])


@router.get("/deployments", response={200: list[DeploymentOut], **REFUSALS}, auth=READ)
def deployment_list(
    request: HttpRequest, status: str = "", host: str = "", owner: str = "", team: str = ""
) -> list[dict[str, Any]]:
    """Every deployment (its replicas folded in), filtered as the list page filters."""
    filters = selectors.ListFilters(status=status, host=host, owner=owner.strip(), team=team)
    return [deployment_out(row.d) for row in selectors.deployment_rows(filters)]


@router.get(
    "/deployments/{int:pk}", response={200: DeploymentOut, 404: Message, **REFUSALS}, auth=READ
)
def deployment_get(request: HttpRequest, pk: int) -> dict[str, Any]:
    return deployment_out(_first(pk))


@router.post(
    "/deployments",
    response={201: DeploymentOut, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def deployment_create(request: HttpRequest, body: DeploymentCreateIn) -> Status[dict[str, Any]]:
    """Plan again on the host, lease the GPUs and launch, as the launch form does."""
    user = principal(request).user
    teams = membership.launchable_team_names(user)
    if body.team and body.team not in teams:
        try:  # its own words: an unknown team, or another team's (which needs the admin role)
            membership.launch_team(user, body.team)
        except membership.TeamError as exc:
            raise ApiError(422, f"body.team: {exc}") from exc
    form = LaunchForm(_form_data(body), teams=teams)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        raise ApiError(422, f"body.{_where(field)}: {errors[0]}")
    first = services.deployment_create(
        user=user,
        request=form.launch_request(),
        http_request=request,
        hub_token=session_hub_token(request.session),
    )
    return Status(201, deployment_out(_first(first.pk)))


@router.post(
    "/deployments/{int:pk}/stop",
    response={202: DeploymentOut, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def deployment_stop(request: HttpRequest, pk: int) -> Status[dict[str, Any]]:
    first = services.deployment_stop(
        user=principal(request).user, deployment=_first(pk), http_request=request
    )
    return Status(202, deployment_out(_first(first.pk)))


@router.post(
    "/deployments/{int:pk}/scale",
    response={202: DeploymentOut, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def deployment_scale(request: HttpRequest, pk: int, body: ScaleIn) -> Status[dict[str, Any]]:
    first = scaling.deployment_scale(
        user=principal(request).user,
        deployment=_first(pk),
        replicas=body.replicas,
        http_request=request,
    )
    return Status(202, deployment_out(_first(first.pk)))


@router.put(
    "/deployments/{int:pk}/idle",
    response={200: DeploymentOut, 404: Message, 409: Message, **REFUSALS},
    auth=DEPLOY,
)
def deployment_idle(request: HttpRequest, pk: int, body: IdleIn) -> Status[dict[str, Any]]:
    first = idle.idle_setting_update(
        user=principal(request).user,
        deployment=_first(pk),
        sleep_after_s=idle.minutes_to_s(body.sleep_after_min),
        http_request=request,
    )
    return Status(200, deployment_out(_first(first.pk)))


def _first(pk: int) -> Deployment:
    """The deployment a replica's id names (its first replica), with what `deployment_out`
    reads prefetched."""
    group_id = Deployment.objects.filter(pk=pk).values_list("replica_of_id", flat=True).first()
    found = _loaded().filter(pk=group_id or pk).first()
    if found is None:
        raise Http404(f"no deployment {pk}")
    return found


def _loaded() -> QuerySet[Deployment]:
    return Deployment.objects.select_related("host", "created_by", "team").prefetch_related(
        "leases__gpu", "replicas__leases__gpu", "ray_nodes__host"
    )


def _form_data(body: DeploymentCreateIn) -> dict[str, Any]:
    """The body as the launch form's POST data: one set of rules for both."""
    data = body.dict()
    data.update(data.pop("scaling_policy") or {})  # the form's Autoscaling fields
    data["replicas"] = str(data["replicas"])
    data["auto_restart"] = {True: "on", False: "off"}.get(data["auto_restart"], "")
    data["gpus"] = ",".join(str(i) for i in data["gpus"])
    data["tensor_split"] = ",".join(f"{r:g}" for r in data["tensor_split"])
    data["allow_partial_offload"] = "on" if data["allow_partial_offload"] else ""
    data["enable_lora"] = "on" if data["enable_lora"] else ""
    return {k: "" if v is None else v for k, v in data.items()}


def _where(field: str) -> str:
    """The body's name for a launch form field (the form's only whole-form errors are the
    scaling policy's)."""
    if field in POLICY_FIELDS:
        return f"scaling_policy.{field}"
    return "scaling_policy" if field == NON_FIELD_ERRORS else field


def _hosts(first: Deployment) -> list[str]:
    """The engine's host, then the further hosts its Ray workers run on (prefetched)."""
    workers = sorted(
        (n for n in first.ray_nodes.all() if n.role == RayNode.Role.WORKER), key=lambda n: n.pk
    )
    return list(dict.fromkeys([first.host.name, *(n.host.name for n in workers)]))


def deployment_out(first: Deployment) -> dict[str, Any]:
    """One deployment from its first replica, its replicas and leases prefetched (the list
    selector's rows, or `_loaded`): no query per deployment."""
    kept = sorted((r for r in first.replicas.all() if not r.retired), key=lambda r: r.replica_index)
    members = [first, *kept]
    state = replicas.overall([m.status for m in members])
    return {
        "id": first.pk,
        "name": first.name,
        "model": first.snapshot.model_ref or first.model_id,
        "revision": first.revision,
        "engine": first.engine,
        "device": first.engine_device,
        "idle": platforms.idle_words(first.engine, first.engine_device),
        "host": first.host.name,
        "hosts": _hosts(first),
        "team": first.team.name if first.team else None,
        "status": state.status,
        "replicas_running": state.running,
        "sleep_after_min": first.sleep_after_min,
        "woke_at": first.woke_at,
        "replicas": [
            {
                "id": m.pk,
                "index": m.replica_index,
                "status": m.status,
                "gpus": sorted(lease.gpu.index for lease in m.leases.all() if lease.active),
            }
            for m in members
        ],
        "created_by": first.created_by.get_username() if first.created_by else None,
        "created_at": first.created_at,
        "command": list(first.planned_argv),
    }

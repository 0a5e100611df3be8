"""Which engine answers a gateway request: the running deployments and their addresses."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from deployments.engines import get_adapter
from deployments.models import Deployment, Status
from playground.gateway import adapter_targets
from playground.gateway.access import AccessError
from playground.gateway.upstream import Target


def deployments_usable(*, user: Any) -> QuerySet[Deployment]:
    """Running engines with a port (every replica): operators may use every one of them."""
    return Deployment.objects.filter(status=Status.RUNNING, port__isnull=False).order_by(
        "name", "replica_index"
    )


def models_usable(*, user: Any) -> list[Deployment]:
    """One running engine per deployment name: what the model lists and the playground show;
    a sleeping or scaled-to-zero deployment too, since a request wakes it (gateway.wake)."""
    seen: dict[str, Deployment] = {}
    for d in deployments_usable(user=user):
        seen.setdefault(d.name, d)
    idle = Deployment.objects.filter(status__in=[Status.SLEEPING, Status.SCALED_TO_ZERO])
    for d in idle.order_by("name", "replica_index"):
        seen.setdefault(d.name, d)
    return sorted(seen.values(), key=lambda d: d.name)


def gateway_replicas(*, user: Any, name: str) -> tuple[Target, ...]:
    """The running engines behind deployment `name` (one per running replica), or behind the
    LoRA adapter `name` (the running replicas that loaded it); raises AccessError 404
    (unknown) or 409 (none running). Which one answers a request is
    playground.gateway.balance's choice."""
    running = list(deployments_usable(user=user).filter(name=name))
    if not running:
        if (adapter := adapter_targets.wanted(name)) is not None:
            return adapter_targets.replicas(adapter, target_of)
        latest = Deployment.objects.filter(name=name).order_by("-created_at").first()
        if latest is None:
            raise AccessError(404, "model_not_found", f"no deployment or adapter named {name!r}")
        raise AccessError(
            409, "deployment_not_running", f"deployment {name!r} is {latest.status}, not running"
        )
    return tuple(target_of(d) for d in running)


def target_of(deployment: Deployment) -> Target:
    keyed = get_adapter(deployment.engine).supports_api_key
    return Target(
        deployment_id=deployment.pk,
        name=deployment.name,
        engine=deployment.engine,
        base_url=deployment.base_url,
        # transformers serve is pinned to its model path: the request omits `model`.
        served_model=deployment.served_model_name if keyed else None,
        api_key=deployment.engine_api_key() if keyed else None,
    )

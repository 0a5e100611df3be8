"""Which engines answer for a LoRA adapter: the running replicas of its deployment that loaded
it (deployments.lifecycle.adapters writes the rows, the host worker marks each replica's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from deployments.models import AdapterStatus, Deployment, DeploymentAdapter, Status
from deployments.models.adapters import WANTED
from playground.gateway.access import AccessError
from playground.gateway.upstream import Target


def wanted(name: str) -> DeploymentAdapter | None:
    """The adapter `name` while it is wanted on a deployment (loading or loaded); None when
    there is none, or it is being unloaded: the gateway answers 404 for it at once."""
    return (
        DeploymentAdapter.objects.filter(name=name, status__in=list(WANTED))
        .select_related("deployment")
        .first()
    )


def replicas(
    adapter: DeploymentAdapter, target_of: Callable[[Deployment], Target]
) -> tuple[Target, ...]:
    """Its replicas' engines, each asked for the adapter by name; AccessError 409 when none
    running holds it yet (its deployment down, asleep, or still loading it)."""
    holding = Deployment.objects.filter(
        adapter_placements__adapter=adapter,
        adapter_placements__status=AdapterStatus.LOADED,
        status=Status.RUNNING,
        port__isnull=False,
    ).order_by("replica_index")
    found = tuple(_for_adapter(target_of(d), adapter.name) for d in holding)
    if found:
        return found
    parent = adapter.deployment.name
    raise AccessError(
        409,
        "adapter_not_ready",
        f"adapter {adapter.name!r} of {parent} is {adapter.status} on no running replica yet",
        parent=parent,
    )


def listed() -> list[DeploymentAdapter]:
    """Adapters to list in /v1/models: loaded on a running replica of their deployment."""
    return list(
        DeploymentAdapter.objects.filter(
            status__in=list(WANTED),
            placements__status=AdapterStatus.LOADED,
            placements__replica__status=Status.RUNNING,
        )
        .select_related("deployment")
        .distinct()
        .order_by("name")
    )


def _for_adapter(target: Target, name: str) -> Target:
    served = name if target.served_model is not None else None
    return replace(target, served_model=served, adapter=name)

"""The checks every write path makes before it writes: the caller's role, the host, the name."""

from __future__ import annotations

from typing import Any

from controlpanel.roles import Role, has_role
from deployments.lifecycle import limits
from deployments.lifecycle.errors import DeploymentError
from deployments.models import HOLDS_NAME, Deployment, DeploymentAdapter
from deployments.models.adapters import HOLDS_NAME as ADAPTER_NAMES
from monitoring.models import Host


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


def check_name(name: str) -> str:
    name = name.strip().lower()
    if problem := limits.name_problem(name):
        raise DeploymentError(problem)
    if Deployment.objects.filter(name=name, status__in=list(HOLDS_NAME)).exists():
        raise DeploymentError(f"A deployment named {name!r} is already active.")
    adapters = DeploymentAdapter.objects.filter(name=name, status__in=list(ADAPTER_NAMES))
    if adapters.filter(deployment__status__in=list(HOLDS_NAME)).exists():
        raise DeploymentError(f"{name!r} is the name of a LoRA adapter loaded on a deployment.")
    return name

"""Relaunching an ended deployment: a new launch with the settings its snapshot kept."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from deployments import planning
from deployments.lifecycle import gguf_launch
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.lifecycle.spanning import further_hosts
from deployments.models import Deployment, Engine


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
    plan = first.snapshot
    overrides = dict(plan.request)
    asked = overrides.pop("replicas", 1)  # launched before replicas: one
    request = LaunchRequest(
        name=first.name,
        model_ref=plan.model_ref or first.model_id,
        host_name=first.host.name,
        engine=first.engine,
        revision=first.revision,
        plan_request=planning.PlanRequest(**overrides),
        auto_restart=first.auto_restart,
        sleep_after_s=first.sleep_after_s,
        replicas=None if asked == "max" else int(asked),
        hosts=further_hosts(first),
        team=first.team.name if first.team else None,
        # llama.cpp's own settings (cache types, -fa, split mode); the split is planned again
        llamacpp=(
            gguf_launch.settings_of(first, split=False) if first.engine == Engine.LLAMACPP else None
        ),
    )
    return deployment_create(
        user=user, request=request, http_request=http_request, hub_token=hub_token
    )

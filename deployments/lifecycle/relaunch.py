"""Relaunching an ended deployment: a new launch with the settings its snapshot kept."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from controlpanel.audit import audit_record
from deployments import planning
from deployments.lifecycle import placement
from deployments.lifecycle.adapters import keep_adapters
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.lifecycle.spanning import further_hosts
from deployments.models import Deployment, ScalingPolicy

POLICY_FIELDS = (
    "min_replicas",
    "max_replicas",
    "ttft_p90_s",
    "tpot_p90_s",
    "waiting_per_replica",
    "kv_usage",
    "up_after_s",
    "down_after_s",
)


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
        **placement.for_engine(first.engine).relaunch_fields(first),
    )
    launched = deployment_create(
        user=user, request=request, http_request=http_request, hub_token=hub_token
    )
    _keep_policy(first, launched, user=user, http_request=http_request)
    if kept := keep_adapters(first, launched, user=user):
        audit_record(
            actor=user,
            action="deployment.adapters_kept",
            target_type="deployment",
            target_id=launched.pk,
            request=http_request,
            detail={"name": launched.name, "kept_from": first.pk, "adapters": kept},
        )
    return launched


def _keep_policy(
    old: Deployment, new: Deployment, *, user: Any, http_request: HttpRequest | None
) -> None:
    """The autoscaling policy goes with the relaunch, as its idle setting does: the same row
    on the new deployment, audited as a setting of it. (Copied as a row, not through
    autoscale.services, which imports this package.)"""
    policy = ScalingPolicy.objects.filter(deployment=old, enabled=True).first()
    if policy is None:
        return
    kept = {name: getattr(policy, name) for name in POLICY_FIELDS}
    ScalingPolicy.objects.create(deployment=new, set_by=user, enabled=True, **kept)
    audit_record(
        actor=user,
        action="deployment.autoscale_policy",
        target_type="deployment",
        target_id=new.pk,
        request=http_request,
        detail={"name": new.name, "kept_from": old.pk, **kept},
    )

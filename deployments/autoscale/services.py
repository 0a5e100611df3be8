"""Setting and clearing a deployment's scaling policy: operators, audited."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.db import transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.policy import PolicySettings as PolicySettings
from deployments.lifecycle.services import require_role
from deployments.models import Deployment, ScalingPolicy
from teams import membership


def policy_set(
    *,
    user: Any,
    deployment: Deployment,
    settings: PolicySettings,
    http_request: HttpRequest | None = None,
) -> ScalingPolicy:
    require_role(user, Role.OPERATOR)
    if problem := settings.problem():
        raise DeploymentError(problem)
    with transaction.atomic():
        first = Deployment.objects.select_for_update().get(pk=deployment.group_id)
        if problem := membership.act_problem(user, first.team_id, first.name, "scaling"):
            raise DeploymentError(problem)
        if first.spans_hosts:
            raise DeploymentError(f"{first.name} spans several hosts: one replica, not scaled.")
        policy, _ = ScalingPolicy.objects.update_or_create(
            deployment=first, defaults={**asdict(settings), "set_by": user, "enabled": True}
        )
        audit_record(
            actor=user,
            action="deployment.autoscale_policy",
            target_type="deployment",
            target_id=first.pk,
            request=http_request,
            detail={"name": first.name, **asdict(settings)},
        )
    return policy


def policy_clear(
    *, user: Any, deployment: Deployment, http_request: HttpRequest | None = None
) -> None:
    require_role(user, Role.OPERATOR)
    with transaction.atomic():
        first = Deployment.objects.select_for_update().get(pk=deployment.group_id)
        if problem := membership.act_problem(user, first.team_id, first.name, "scaling"):
            raise DeploymentError(problem)
        if ScalingPolicy.objects.filter(deployment=first).delete()[0]:
            audit_record(
                actor=user,
                action="deployment.autoscale_policy",
                target_type="deployment",
                target_id=first.pk,
                request=http_request,
                detail={"name": first.name, "cleared": True},
            )

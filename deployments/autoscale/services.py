"""Setting and clearing a deployment's scaling policy: operators, audited."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.scaling import MAX_REPLICAS
from deployments.lifecycle.services import require_role
from deployments.models import Deployment, ScalingPolicy
from teams import membership


@dataclass(frozen=True, slots=True)
class PolicySettings:
    min_replicas: int
    max_replicas: int
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    waiting_per_replica: float | None = None
    kv_usage: float | None = None
    up_after_s: float = 15.0
    down_after_s: float = 60.0

    def problem(self) -> str | None:
        if not 0 <= self.min_replicas <= self.max_replicas <= MAX_REPLICAS or self.max_replicas < 1:
            return f"Replicas: 0 ≤ min ≤ max, max from 1 to {MAX_REPLICAS}."
        targets = (self.ttft_p90_s, self.tpot_p90_s, self.waiting_per_replica, self.kv_usage)
        if all(t is None for t in targets):
            return "Give a target: a p90 TTFT or TPOT, waiting requests a replica, or KV usage."
        if any(t is not None and t <= 0 for t in targets):
            return "Targets are positive numbers."
        if self.kv_usage is not None and self.kv_usage > 1:
            return "KV-cache usage is a fraction from 0 to 1 (0.8 = 80 %)."
        if not (1 <= self.up_after_s <= 3600 and 1 <= self.down_after_s <= 86400):
            return "Windows: up after 1 s to 1 h, down after 1 s to 1 day."
        return None


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

"""A scaling policy that comes with a launch: what the launch must be to carry one, and its row,
written in the launch's own transaction (lifecycle.services._create)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, NamedTuple

from django.http import HttpRequest

from controlpanel.audit import audit_record
from deployments.lifecycle.policy import POLICY_FIELDS, PolicySettings
from deployments.lifecycle.policy_form import settings_of
from deployments.models import Deployment, ScalingPolicy


class Refusal(NamedTuple):
    field: str  # the launch form's field to name; "": the policy as a whole
    message: str


def from_form(
    data: dict[str, Any], *, replicas: int | None, hosts: Sequence[str]
) -> PolicySettings | Refusal | None:
    """The launch form's Autoscaling fields as a policy; None when they are all blank."""
    if data.get("max_replicas") is None:
        if any(data.get(k) is not None for k in POLICY_FIELDS):
            return Refusal(
                "max_replicas",
                "Autoscaling needs max replicas: give it, or leave the Autoscaling fields blank.",
            )
        return None
    policy = settings_of(data, min_replicas=replicas or 1)
    return refusal(policy, replicas=replicas, hosts=hosts) or policy


def refusal(
    policy: PolicySettings | None, *, replicas: int | None, hosts: Sequence[str]
) -> Refusal | None:
    """Why this launch cannot carry `policy` (`replicas` None: as many as fit)."""
    if policy is None:
        return None
    if replicas is None:
        return Refusal(
            "replicas", "Autoscaling starts from a number of replicas, not max: give a number."
        )
    if hosts:
        return Refusal(
            "hosts",
            "A replica spanning further hosts is never scaled: launch on one host to autoscale.",
        )
    if policy.max_replicas < replicas:
        return Refusal(
            "max_replicas",
            f"Max replicas ({policy.max_replicas}) is below the {replicas} launched.",
        )
    if problem := policy.problem():
        return Refusal("", problem)
    return None


def create(
    first: Deployment,
    policy: PolicySettings | None,
    *,
    user: Any,
    http_request: HttpRequest | None,
) -> None:
    """The policy's row on the new deployment, set by the launcher and audited as a setting of
    it, as the page's own policy form is (autoscale.services.policy_set)."""
    if policy is None:
        return
    ScalingPolicy.objects.create(deployment=first, set_by=user, enabled=True, **asdict(policy))
    audit_record(
        actor=user,
        action="deployment.autoscale_policy",
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail={"name": first.name, "at_launch": True, **asdict(policy)},
    )

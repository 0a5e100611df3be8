"""What the deployment page shows of autoscaling: the policy, its decisions, the chart."""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import Any

from controlpanel.models import AuditEvent
from deployments.autoscale import series
from deployments.autoscale.forms import PolicyForm
from deployments.autoscale.services import PolicySettings
from deployments.models import Deployment, ScalingPolicy

DECISIONS_SHOWN = 20
CHART_POINTS = 720  # an hour at 5 s


def policy_of(first: Deployment) -> ScalingPolicy | None:
    return ScalingPolicy.objects.filter(deployment=first).first()


def decisions(first: Deployment, *, limit: int = DECISIONS_SHOWN) -> list[dict[str, Any]]:
    rows = AuditEvent.objects.filter(
        action="deployment.autoscale", target_type="deployment", target_id=str(first.pk)
    ).order_by("-id")[:limit]
    return [
        {
            "at": row.created_at.isoformat(),
            "reason": row.detail.get("reason", ""),
            "refused": row.detail.get("refused", ""),
            "before": row.detail.get("replicas_before"),
            "after": row.detail.get("replicas"),
        }
        for row in rows
    ]


def section_context(first: Deployment) -> dict[str, Any]:
    policy = policy_of(first)
    initial = {f.name: getattr(policy, f.name) for f in fields(PolicySettings)} if policy else None
    return {"first": first, "policy": policy, "form": PolicyForm(initial=initial)}


def chart(first: Deployment) -> dict[str, Any]:
    """Replicas, load and the SLO over time, and the latest decisions, for the page's script."""
    rows = series.read(first.pk, last=CHART_POINTS)
    policy = policy_of(first)
    return {
        "live_replicas": first.group()
        .filter(status__in=["pending", "starting", "running"])
        .count(),
        "policy": asdict(_settings(policy)) if policy else None,
        "last_decision": policy.last_decision if policy else "",
        "points": [{k: _finite(v) for k, v in row.items()} for row in rows],
        "decisions": decisions(first),
    }


def _settings(policy: ScalingPolicy) -> PolicySettings:
    return PolicySettings(**{f.name: getattr(policy, f.name) for f in fields(PolicySettings)})


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value

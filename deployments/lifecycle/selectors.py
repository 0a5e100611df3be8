"""Read paths for the deployment pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import QueryDict

from controlpanel.models import AuditEvent
from deployments.catalog.selectors import concurrency_text
from deployments.lifecycle.planned_vs_measured import memory_table
from deployments.lifecycle.shares import share_table
from deployments.models import Deployment, Status
from monitoring.models import Host

STATUS_CHOICES = Status.choices


@dataclass(frozen=True, slots=True)
class ListFilters:
    status: str = ""
    host: str = ""
    owner: str = ""

    @classmethod
    def from_query(cls, query: QueryDict) -> ListFilters:
        return cls(query.get("status", ""), query.get("host", ""), query.get("owner", "").strip())


def deployment_rows(filters: ListFilters) -> QuerySet[Deployment]:
    rows = Deployment.objects.select_related("host", "created_by").prefetch_related("leases__gpu")
    if filters.status:
        rows = rows.filter(status=filters.status)
    if filters.host:
        rows = rows.filter(host__name=filters.host)
    if filters.owner:
        rows = rows.filter(created_by__username__icontains=filters.owner)
    return rows


def host_names() -> list[str]:
    return list(Host.objects.values_list("name", flat=True))


def planned_memory(deployment: Deployment) -> list[dict[str, Any]]:
    per_gpu = deployment.plan.get("per_gpu", [])
    replica = (deployment.plan.get("gpus") or [[]])[0]
    return [{"gpu": ref.get("index"), **mem} for ref, mem in zip(replica, per_gpu, strict=False)]


def detail_context(deployment: Deployment) -> dict[str, Any]:
    audit = AuditEvent.objects.filter(target_type="deployment", target_id=str(deployment.pk))
    return {
        "d": deployment,
        "events": deployment.events.all(),
        "leases": deployment.leases.select_related("gpu"),
        "planned": planned_memory(deployment),
        "memory": memory_table(deployment),
        "shares": share_table(deployment),
        "audit": audit[:20],
        "diagnosis": deployment.diagnosis or None,
        "plan_figures": plan_figures(deployment.plan),
    }


def plan_figures(plan: dict[str, Any]) -> dict[str, str]:
    """The plan's KV cache tokens and max concurrency as people read them (305,855,280)."""
    tokens, concurrency = plan.get("kv_cache_tokens"), plan.get("max_concurrency")
    return {
        "kv_cache_tokens": "?" if tokens is None else f"{int(tokens):,}",
        "max_concurrency": "?" if concurrency is None else concurrency_text(float(concurrency)),
    }

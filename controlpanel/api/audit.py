"""The audit trail (audit scope, admin role) and usage (read scope) through the API."""

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Query, Router, Schema
from ninja.pagination import LimitOffsetPagination, paginate

from controlpanel.api.auth import AUDIT, READ
from controlpanel.api.schemas import REFUSALS, AuditOut, AuditQuery, UsageOut
from controlpanel.selectors import AuditFilters, audit_events
from deployments.models import GpuLease

router = Router(tags=["audit and usage"])
PAGE_MAX = 500
OFFSET_MAX = 10**9  # past it the database's own limit (a bigint) would answer with a 500


class AuditPages(LimitOffsetPagination):
    class Input(Schema):
        limit: int = Field(100, ge=1, le=PAGE_MAX)
        offset: int = Field(0, ge=0, le=OFFSET_MAX)


USAGE_DAYS = 30


class UsageQuery(Schema):
    days: int = Field(USAGE_DAYS, ge=1, le=366, description="the last this many days")


@router.get(
    "/audit",
    response={200: list[AuditOut], **REFUSALS},
    auth=AUDIT,
)
@paginate(AuditPages, max_limit=PAGE_MAX)
def audit_list(request: HttpRequest, filters: Query[AuditQuery]) -> Any:
    """Audit rows, newest first, filtered as the audit page filters; paged by limit/offset."""
    return audit_events(AuditFilters(**filters.dict()))


@router.get("/usage", response={200: UsageOut, **REFUSALS}, auth=READ)
def usage(request: HttpRequest, query: Query[UsageQuery]) -> dict[str, Any]:
    """GPU-hours held by leases over the last `days` days (1 to 366), by user and by
    deployment, derived from the lease rows (so right after restarts)."""
    until = timezone.now()
    return lease_gpu_hours(since=until - timedelta(days=query.days), until=until)


def lease_gpu_hours(*, since: datetime, until: datetime) -> dict[str, Any]:
    leases = GpuLease.objects.filter(created_at__lt=until).filter(
        Q(released_at__isnull=True) | Q(released_at__gt=since)
    )
    by_user: dict[str, float] = defaultdict(float)
    by_deployment: dict[str, float] = defaultdict(float)
    rows = leases.values_list(
        "created_at", "released_at", "deployment__name", "deployment__created_by__username"
    )
    for start, end, name, user in rows:
        held = (min(end or until, until) - max(start, since)).total_seconds() / 3600
        by_user[user or "-"] += held
        by_deployment[name] += held
    return {
        "since": since,
        "until": until,
        "gpu_hours": round(sum(by_user.values()), 4),
        "by_user": _rows(by_user),
        "by_deployment": _rows(by_deployment),
    }


def _rows(totals: dict[str, float]) -> list[dict[str, Any]]:
    ordered = sorted(totals.items(), key=lambda kv: -kv[1])
    return [{"key": k, "gpu_hours": round(v, 4)} for k, v in ordered]

"""The audit trail (audit scope, admin role) and usage (read scope, the Usage page's role)
through the API."""

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Query, Router, Schema

from controlpanel.api.auth import AUDIT, USAGE, ApiError
from controlpanel.api.schemas import REFUSALS, AuditPageOut, AuditQuery, UsageOut
from controlpanel.auditchain.records import record_of
from controlpanel.selectors import AuditFilters, audit_events
from teams import usage as team_usage
from teams.membership import team_names
from teams.usage import DAYS_DEFAULT, DAYS_MAX

router = Router(tags=["audit and usage"])
PAGE_MAX = 500
AFTER_MAX = 2**63 - 1  # the id column's own limit: past it the database would answer a 500


class AuditPageQuery(AuditQuery):
    after_id: int = Field(0, ge=0, le=AFTER_MAX, description="rows with a greater id")
    limit: int = Field(100, ge=1, le=PAGE_MAX)


class UsageQuery(Schema):
    days: int = Field(DAYS_DEFAULT, ge=1, le=DAYS_MAX, description="the last this many UTC days")
    team: str = Field("", max_length=63, description="one team's GPU-hours and quota; blank: all")


@router.get("/audit", response={200: AuditPageOut, **REFUSALS}, auth=AUDIT)
def audit_list(request: HttpRequest, query: Query[AuditPageQuery]) -> dict[str, Any]:
    """Audit rows, oldest first, filtered as the audit page filters; keyset pages (as the
    export): pass the answer's next_after_id as after_id. Each row carries seq, prev_hash
    and row_hash so a client can check the chain."""
    filters = query.dict()
    after, limit = filters.pop("after_id"), filters.pop("limit")
    rows = audit_events(AuditFilters(**filters)).filter(id__gt=after).order_by("id")
    page = list(rows[: limit + 1])
    items = [{**record_of(row), "actor": row.actor_name} for row in page[:limit]]
    return {"items": items, "next_after_id": page[limit - 1].pk if len(page) > limit else None}


@router.get("/usage", response={200: UsageOut, **REFUSALS}, auth=USAGE)
def usage(request: HttpRequest, query: Query[UsageQuery]) -> dict[str, Any]:
    """The Usage page's figures: GPU-hours by team and user per day (from the lease rows),
    gateway tokens by token and deployment (from the audit rows), each team's quota and its
    use now."""
    team = query.team.strip()
    if team and team not in (known := team_names()):
        raise ApiError(
            422, f"query.team: there is no team {team!r}; teams: {', '.join(known) or 'none'}"
        )
    return team_usage.summary(now=timezone.now(), days=query.days, team=team)

"""Read paths for the control panel pages."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import redis
from django.core.paginator import Page
from django.db.models import QuerySet
from django.http import QueryDict
from django.utils import timezone

from controlpanel import redisconn
from controlpanel.models import AuditEvent
from monitoring.models import Host

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LiveStatus:
    available: bool
    reason: str


def live_data_status() -> LiveStatus:
    """Whether Redis (live samples, channel layer, task queue) answers right now."""
    try:
        client = redisconn.client(connect_timeout_s=0.5)
        client.ping()
    except redis.RedisError as exc:
        log.warning("Redis at REDIS_URL does not answer: %s", exc)
        return LiveStatus(False, "Live data is unavailable: Redis does not answer.")
    return LiveStatus(True, "")


def host_overview() -> list[dict[str, Any]]:
    now = timezone.now()
    hosts = Host.objects.in_service().with_gpus()
    return [{"host": h, "online": h.is_online(now), "gpus": list(h.gpus.all())} for h in hosts]


@dataclass(frozen=True, slots=True)
class AuditFilters:
    actor: str = ""
    action: str = ""
    target: str = ""
    since: date | None = None

    @classmethod
    def from_query(cls, query: QueryDict) -> AuditFilters:
        since = query.get("since") or ""
        try:
            since_date = date.fromisoformat(since) if since else None
        except ValueError:
            since_date = None
        return cls(
            actor=query.get("actor", "").strip(),
            action=query.get("action", "").strip(),
            target=query.get("target", "").strip(),
            since=since_date,
        )


def audit_events(filters: AuditFilters) -> QuerySet[AuditEvent]:
    rows = AuditEvent.objects.all()
    if filters.actor:
        rows = rows.filter(actor_name__icontains=filters.actor)
    if filters.action:
        rows = rows.filter(action=filters.action)
    if filters.target:
        rows = rows.filter(target_type=filters.target)
    if filters.since:
        rows = rows.filter(created_at__date__gte=filters.since)
    return rows


def audit_actions() -> list[str]:
    return list(AuditEvent.objects.order_by().values_list("action", flat=True).distinct())


@dataclass(frozen=True, slots=True)
class AuditRow:
    event: AuditEvent
    detail_json: str  # readable JSON of the detail, less the argv
    argv: list[str] | None  # the engine command, word by word as the engine got it


def audit_rows(page: Page[AuditEvent]) -> list[AuditRow]:
    return [_audit_row(event) for event in page]


def _audit_row(event: AuditEvent) -> AuditRow:
    detail = event.detail if isinstance(event.detail, dict) else {"value": event.detail}
    argv = detail.get("argv")
    is_argv = isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    rest = {k: v for k, v in detail.items() if k != "argv"} if is_argv else detail
    text = json.dumps(rest, indent=2, sort_keys=True, ensure_ascii=False) if rest else ""
    return AuditRow(event, text, argv if is_argv else None)


def audit_page(
    *, since: datetime | None = None, until: datetime | None = None, after_id: int = 0, limit: int
) -> list[AuditEvent]:
    """Up to `limit` rows with an id past `after_id`, oldest first, created in [since, until):
    keyset pages, as cheap at the millionth row as at the first (exports, the API).
    `controlpanel.auditchain.records.record_of` turns a row into a plain record."""
    rows = AuditEvent.objects.filter(id__gt=after_id).order_by("id")
    if since:
        rows = rows.filter(created_at__gte=since)
    if until:
        rows = rows.filter(created_at__lt=until)
    return list(rows[:limit])

"""The monthly GPU-hours limit for deployments already running: once a team's month is used
up, each of its live deployments is flagged (an event and an audit row, once), and stopped too
where the team says so. Run every SHARDBOARD_QUOTA_CHECK_S by each host worker (teams.host.tasks);
running it twice at once is harmless: the flag is a compare-and-set, the stop locks the rows
and skips what is already stopping."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from controlpanel.audit import audit_record
from deployments.lifecycle.services import stop_rows
from deployments.models import Deployment, Status
from teams import hours, quota
from teams.models import Team

log = logging.getLogger(__name__)
_UP = frozenset({Status.PENDING, Status.STARTING, Status.RUNNING, Status.RESTARTING})


def enforce_monthly(now: datetime) -> dict[str, Any]:
    """Flag (and stop, where set) the live deployments of every team past its monthly limit."""
    flagged: list[int] = []
    stopped: list[int] = []
    # A flag holds for its month, and only while the limit is still passed (an admin may
    # raise it, or remove it).
    Deployment.objects.filter(over_quota_at__lt=hours.month_start(now)).update(over_quota_at=None)
    Deployment.objects.filter(
        over_quota_at__isnull=False, team__gpu_hours_per_month__isnull=True
    ).update(over_quota_at=None)
    for team in Team.objects.filter(gpu_hours_per_month__isnull=False):
        limit = team.gpu_hours_per_month or 0.0  # never None here: filtered above
        used = quota.gpu_hours_month(team.pk, now)
        if used < limit:
            team.deployments.filter(over_quota_at__isnull=False).update(over_quota_at=None)
            continue
        why = f"team {team.name} used {used:.1f} of its {limit:g} GPU-hours for {now:%B %Y}"
        for first in _live_firsts(team):
            if _flag(first, now, why):
                flagged.append(first.pk)
            if team.stop_over_monthly and _stop(first, why):
                stopped.append(first.pk)
    return {"flagged": flagged, "stopped": stopped}


def _live_firsts(team: Team) -> list[Deployment]:
    rows = Deployment.objects.filter(team=team, status__in=list(_UP)).select_related("replica_of")
    firsts = {(r.replica_of or r).pk: (r.replica_of or r) for r in rows}
    return [firsts[pk] for pk in sorted(firsts)]


@transaction.atomic
def _flag(first: Deployment, now: datetime, why: str) -> bool:
    if (
        Deployment.objects.filter(pk=first.pk, over_quota_at__isnull=True).update(over_quota_at=now)
        != 1
    ):
        return False  # flagged before (or by another worker just now)
    first.events.create(
        old_status=first.status, new_status=first.status, reason=f"over quota: {why}"
    )
    audit_record(
        actor=None,
        action="team.quota_exceeded",
        target_type="deployment",
        target_id=first.pk,
        detail={"name": first.name, "team": first.team.name if first.team else None, "why": why},
    )
    return True


@transaction.atomic
def _stop(first: Deployment, why: str) -> bool:
    rows = list(first.group().select_for_update().order_by("pk"))
    if not any(r.status in _UP for r in rows):
        return False
    stop_rows(rows, actor=None, why=f"stopped by quota: {why}")
    return True

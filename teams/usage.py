"""What was used, derived from the rows that outlive every process: GPU-hours from the lease
rows, gateway tokens from the gateway's audit rows. Plain functions: the Usage page and the
automation API call the same ones (`summary`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import IntegerField, Q, Sum
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, TruncDate

from controlpanel.models import AuditEvent
from deployments.models import GpuLease
from playground.models import ApiToken
from teams import hours, quota
from teams.models import Team

NO_TEAM = "(no team)"
DAYS_DEFAULT = 30  # the window the Usage page and the API show
DAYS_MAX = 92
Series = dict[str, dict[str, float]]  # name → ISO day → amount


@dataclass(frozen=True, slots=True)
class QuotaRow:
    team: str
    gpus_held: int
    max_gpus: int | None
    gpu_hours_month: float
    gpu_hours_per_month: float | None
    stop_over_monthly: bool
    flagged: list[str]  # deployments that ran past the monthly limit

    @property
    def gpus_text(self) -> str:
        return _of(self.gpus_held, self.max_gpus)

    @property
    def hours_text(self) -> str:
        limit = self.gpu_hours_per_month
        return (
            f"{self.gpu_hours_month:.1f} of {limit:g}"
            if limit is not None
            else (f"{self.gpu_hours_month:.1f} (no limit)")
        )

    @property
    def over(self) -> bool:
        limit = self.gpu_hours_per_month
        return limit is not None and self.gpu_hours_month >= limit


def _of(used: float, limit: float | None) -> str:
    return f"{used:g} of {limit:g}" if limit is not None else f"{used:g} (no limit)"


def window(now: datetime, days: int) -> tuple[datetime, datetime]:
    """[the start of the UTC day `days - 1` days ago, now)."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days - 1), now


def gpu_hours(start: datetime, end: datetime, team: str = "") -> dict[str, Series]:
    """GPU-hours per day, by team and by user (the launcher), from the lease rows."""
    leases = GpuLease.objects.filter(created_at__lt=end).filter(
        Q(active=True) | Q(released_at__gt=start)
    )
    if team:
        leases = leases.filter(deployment__team__name=team)
    by_team: Series = defaultdict(lambda: defaultdict(float))
    by_user: Series = defaultdict(lambda: defaultdict(float))
    rows = leases.values_list(
        "created_at",
        "released_at",
        "active",
        "deployment__team__name",
        "deployment__created_by__username",
    )
    for created, released, active, team_name, user in rows:
        split = hours.hours_by_day(created, None if active else released, start, end)
        for day, amount in split.items():
            by_team[team_name or NO_TEAM][day.isoformat()] += amount
            by_user[user][day.isoformat()] += amount
    return {"team": _plain(by_team), "user": _plain(by_user)}


def gateway_tokens(start: datetime, end: datetime) -> dict[str, Series]:
    """Prompt + completion tokens per day, by API token and by deployment (a LoRA adapter's
    apart, as "deployment:adapter"), from the audit rows of gateway requests (a browser session
    counts as "playground (session)"), summed in the database: a busy month is millions of
    rows."""
    names = {t.token_hash[:16]: f"{t.name} ({t.user.get_username()})" for t in _tokens()}
    by_token: Series = defaultdict(lambda: defaultdict(float))
    by_deployment: Series = defaultdict(lambda: defaultdict(float))
    for row in _gateway_sums(start, end, "day", "bearer", "deployment", "adapter"):
        if not row["used"]:
            continue
        day, bearer = row["day"].isoformat(), row["bearer"]
        label = names.get(bearer, f"token {bearer}") if bearer else "playground (session)"
        by_token[label][day] += row["used"]
        where = row["deployment"] or "?"
        by_deployment[f"{where}:{row['adapter']}" if row["adapter"] else where][day] += row["used"]
    return {"token": _plain(by_token), "deployment": _plain(by_deployment)}


def _usage_part(name: str) -> Coalesce:
    return Coalesce(
        Cast(KeyTextTransform(name, KeyTransform("usage", "detail")), IntegerField()), 0
    )


_USED = _usage_part("prompt") + _usage_part("completion")


def _gateway_sums(start: datetime, end: datetime, *by: str) -> Iterable[dict[str, Any]]:
    """The gateway's tokens (`used`) in [start, end), grouped by `by` (of: day, bearer,
    deployment, adapter, actor_name)."""
    rows: Iterable[dict[str, Any]] = (
        AuditEvent.objects.filter(
            action="playground.request", created_at__gte=start, created_at__lt=end
        )
        .annotate(
            day=TruncDate("created_at", tzinfo=UTC),
            bearer=KeyTextTransform("bearer_id", "detail"),
            deployment=KeyTextTransform("deployment", "detail"),
            adapter=KeyTextTransform("adapter", "detail"),
        )
        .values(*by)
        .annotate(used=Sum(_USED))
        .order_by()
    )
    return rows


def _tokens() -> list[ApiToken]:
    return list(ApiToken.objects.select_related("user"))


def _plain(series: Series) -> Series:
    return {name: dict(sorted(days.items())) for name, days in sorted(series.items())}


def quota_rows(now: datetime, team: str = "") -> list[QuotaRow]:
    teams = Team.objects.order_by("name")
    if team:
        teams = teams.filter(name=team)
    out = []
    for t in teams:
        use = quota.team_use(t, now)
        flagged = t.deployments.filter(over_quota_at__isnull=False, replica_of__isnull=True)
        out.append(
            QuotaRow(
                t.name,
                use.gpus_held,
                t.max_gpus,
                use.gpu_hours_month,
                t.gpu_hours_per_month,
                t.stop_over_monthly,
                sorted({d.name for d in flagged.filter(status__in=_LIVE)}),
            )
        )
    return out


_LIVE = ["pending", "starting", "running", "restarting"]


def gateway_limits() -> dict[str, int]:
    return {
        "requests per minute, per API token": settings.GATEWAY_RPM_PER_TOKEN,
        "requests per minute, per user": settings.GATEWAY_RPM_PER_USER,
        "tokens per day, per API token": settings.GATEWAY_TOKENS_PER_DAY_PER_TOKEN,
        "tokens per day, per user": settings.GATEWAY_TOKENS_PER_DAY_PER_USER,
    }


def tokens_today_by_user(now: datetime) -> dict[str, int]:
    start, _ = window(now, 1)
    rows = _gateway_sums(start, now, "actor_name")
    return {
        r["actor_name"]: r["used"] for r in sorted(rows, key=lambda r: r["actor_name"]) if r["used"]
    }


def summary(*, now: datetime, days: int = 30, team: str = "") -> dict[str, Any]:
    """Everything the Usage page shows, as plain data (JSON-ready)."""
    start, end = window(now, days)
    return {
        "since": start.isoformat(),
        "until": end.isoformat(),
        "days": [(start.date() + timedelta(days=k)).isoformat() for k in range(days)],
        "gpu_hours": gpu_hours(start, end, team),
        "gateway_tokens": gateway_tokens(start, end),
        "quotas": [_quota_json(r) for r in quota_rows(now, team)],
        "gateway_limits": gateway_limits(),
        "tokens_today_by_user": tokens_today_by_user(now),
    }


def _quota_json(row: QuotaRow) -> dict[str, Any]:
    return {
        "team": row.team,
        "gpus_held": row.gpus_held,
        "max_gpus": row.max_gpus,
        "gpu_hours_month": round(row.gpu_hours_month, 3),
        "gpu_hours_per_month": row.gpu_hours_per_month,
        "stop_over_monthly": row.stop_over_monthly,
        "flagged": row.flagged,
    }

"""Team quotas, checked where the action happens: inside the launch's (or scale's) transaction,
before a GPU is leased, with the team's row locked.

The lock serialises the launches of one team (on PostgreSQL a row lock; SQLite holds one write
lock per transaction anyway), so two launches cannot both see room for one more GPU. It is
taken before the GPU rows, in every path, so no two transactions wait on each other in a ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import DateTimeField, DurationField, ExpressionWrapper, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from deployments.models import GpuLease
from teams import hours
from teams.models import Team


class QuotaExceeded(Exception):
    """A launch refused by its team's quota; the message names the limit and the use."""


@dataclass(frozen=True, slots=True)
class TeamUse:
    team: Team
    gpus_held: int
    gpu_hours_month: float


def gpus_held(team_id: int) -> int:
    return GpuLease.objects.on_gpus().filter(active=True, deployment__team_id=team_id).count()


def gpu_hours_month(team_id: int, now: datetime) -> float:
    """The team's GPU-hours from the start of `now`'s month to `now`, summed in the database
    (a busy month is thousands of leases: summed in Python they cost the launch ~50 ms)."""
    start = hours.month_start(now)
    since, until = Value(start, DateTimeField()), Value(now, DateTimeField())
    held = ExpressionWrapper(
        Least(Coalesce("released_at", until), until) - Greatest("created_at", since),
        output_field=DurationField(),
    )
    total = (
        GpuLease.objects.on_gpus()
        .filter(deployment__team_id=team_id, created_at__lt=now)
        .filter(Q(active=True) | Q(released_at__gt=start))
        .aggregate(total=Sum(held))["total"]
    )
    return total.total_seconds() / hours.HOUR_S if total else 0.0


def team_use(team: Team, now: datetime) -> TeamUse:
    return TeamUse(team, gpus_held(team.pk), gpu_hours_month(team.pk, now))


def check_launch(*, team_id: int, adding_gpus: int, now: datetime) -> None:
    """Refuse a launch (or scale-up) of `adding_gpus` GPUs that would pass a quota of the team.
    Call inside the transaction that then leases the GPUs."""
    team = Team.objects.select_for_update().get(pk=team_id)
    if team.max_gpus is not None:
        held = gpus_held(team.pk)
        if held + adding_gpus > team.max_gpus:
            raise QuotaExceeded(
                f"Team {team.name} may hold {team.max_gpus} GPUs at once (its quota); it holds "
                f"{held} now and this needs {adding_gpus} more. Stop one of its deployments, "
                "or ask an admin to raise the quota."
            )
    if team.gpu_hours_per_month is not None:
        used = gpu_hours_month(team.pk, now)
        if used >= team.gpu_hours_per_month:
            raise QuotaExceeded(
                f"Team {team.name} has used {used:.1f} of its {team.gpu_hours_per_month:g} "
                f"GPU-hours for {now:%B %Y} (its monthly quota); launches wait for next month "
                "or a higher quota."
            )

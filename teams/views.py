"""The Usage page: GPU-hours and gateway tokens over a window, and each quota's current use."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from controlpanel.roles import Role, role_required
from teams import usage
from teams.models import Team

DAYS_DEFAULT, DAYS_MAX = usage.DAYS_DEFAULT, usage.DAYS_MAX


def _days(raw: str | None) -> tuple[int, str]:
    """The window asked for, or the default and why."""
    if not raw:
        return DAYS_DEFAULT, ""
    try:
        days = int(raw)
    except ValueError:
        days = 0
    if not 1 <= days <= DAYS_MAX:
        return DAYS_DEFAULT, f"Days: a whole number from 1 to {DAYS_MAX}; showing {DAYS_DEFAULT}."
    return days, ""


@role_required(Role.OPERATOR)
def usage_page(request: HttpRequest) -> HttpResponse:
    days, problem = _days(request.GET.get("days"))
    names = list(Team.objects.order_by("name").values_list("name", flat=True))
    team = request.GET.get("team", "")
    if team and team not in names:
        problem, team = f"{problem} Unknown team {team!r}; showing every team.".strip(), ""
    data = usage.summary(now=timezone.now(), days=days, team=team)
    context = {
        "data": data,
        "days": days,
        "team": team,
        "teams": names,
        "problem": problem,
        "quotas": usage.quota_rows(timezone.now(), team),
    }
    return render(request, "teams/usage.html", context, status=400 if problem else 200)

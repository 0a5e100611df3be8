"""Which team a launch belongs to, and who may act on a team's deployments."""

from __future__ import annotations

from typing import Any

from controlpanel.roles import Role, has_role
from teams.models import Team


class TeamError(Exception):
    """The team asked for cannot be used; the message says why and what to do."""


def teams_of(user: Any) -> list[Team]:
    if not getattr(user, "is_authenticated", False):
        return []
    return list(Team.objects.filter(members=user).order_by("name"))


def team_names() -> list[str]:
    return list(Team.objects.order_by("name").values_list("name", flat=True))


def launchable_team_names(user: Any) -> list[str]:
    """The teams `user` may launch for: its own; every team for an admin."""
    if has_role(user, Role.ADMIN):
        return team_names()
    return [t.name for t in teams_of(user)]


def launch_team(user: Any, name: str | None) -> Team | None:
    """The team a launch by `user` belongs to: the one named, else the user's only team.
    None for a user in no team (no quota applies)."""
    mine = teams_of(user)
    name = (name or "").strip()
    if name:
        team = Team.objects.filter(name=name).first()
        if team is None:
            raise TeamError(f"Unknown team {name!r}.")
        if team not in mine and not has_role(user, Role.ADMIN):
            raise TeamError(
                f"You are not in team {name}; launching for another team needs the Admin role."
            )
        return team
    if len(mine) > 1:
        names = ", ".join(t.name for t in mine)
        raise TeamError(f"You are in several teams ({names}): choose the one this launch is for.")
    return mine[0] if mine else None


def act_problem(user: Any, team_id: int | None, name: str, doing: str) -> str | None:
    """Why `user` may not do `doing` ("stopping", "scaling") to the deployment `name` of the
    team `team_id`, or None. Operators act on their teams' deployments; admins on any."""
    if team_id is None or has_role(user, Role.ADMIN):
        return None
    if Team.objects.filter(pk=team_id, members=user).exists():
        return None
    team = Team.objects.get(pk=team_id)
    return (
        f"{name} belongs to team {team.name}, which you are not in; {doing} another team's "
        "deployment needs the Admin role."
    )

"""Read paths of the playground."""

from __future__ import annotations

from typing import Any

from django.db.models import F, Q, QuerySet
from django.utils import timezone

from controlpanel.roles import Role, has_role
from playground.models import ApiToken, PlaygroundRun, Scope

RUNS_SHOWN = 50


def runs_of(*, user: Any, limit: int = RUNS_SHOWN) -> QuerySet[PlaygroundRun]:
    return PlaygroundRun.objects.filter(user=user).order_by("-created_at", "-id")[:limit]


def tokens_of(*, user: Any) -> QuerySet[ApiToken]:
    """The user's live tokens that /v1/ takes (the playground's list)."""
    live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    rows = ApiToken.objects.filter(live, user=user, revoked_at__isnull=True)
    return rows.filter(scopes__regex=rf"(^| ){Scope.INFER.value}( |$)").order_by("-created_at")


def tokens_page(*, user: Any) -> QuerySet[ApiToken]:
    """The Tokens page: the user's tokens, revoked ones too (for the record); an admin sees
    everyone's."""
    live_first = F("revoked_at").asc(nulls_first=True)
    rows = ApiToken.objects.select_related("user").order_by(live_first, "-created_at", "-id")
    return rows if has_role(user, Role.ADMIN) else rows.filter(user=user)


def run_payload(run: PlaygroundRun) -> dict[str, Any]:
    """One run as the page's JavaScript reads it (reopen, re-run)."""
    return {
        "id": run.pk,
        "deployment": run.deployment_name,
        "mode": run.mode,
        "parameters": run.parameters,
        "messages": run.messages,
        "prompt": run.prompt,
        "answer": run.answer,
        "status": run.status,
        "error": run.error,
        "server": run.server_timings,
        "browser": run.browser_timings,
        "created_at": run.created_at.isoformat(),
    }

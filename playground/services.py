"""Write paths of the playground page: personal API tokens and the browser's timings of a run."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from controlpanel.audit import audit_record
from controlpanel.roles import Role, has_role
from playground import tokens
from playground.gateway.access import token_callers
from playground.models import ApiToken, PlaygroundRun, Scope

BROWSER_TIMING_KEYS = ("ttft_ms", "duration_ms", "tokens_per_s", "completion_tokens", "chunks")


class TokenError(ValueError):
    """A token that cannot be made as asked; the message names the field."""


@transaction.atomic
def token_create(
    *,
    user: Any,
    name: str,
    scopes: Iterable[str] = (Scope.INFER,),
    expires_at: datetime | None = None,
    request: HttpRequest | None = None,
) -> tuple[ApiToken, str]:
    """A new token and its one-time plain text."""
    wanted = _scopes(scopes)
    if expires_at is not None and expires_at <= timezone.now():
        raise TokenError("expires_at: give a time in the future, or none for no expiry.")
    raw = tokens.token_new()
    token = ApiToken.objects.create(
        user=user,
        name="".join(c for c in name if c.isprintable()).strip()[:100] or "token",
        token_hash=tokens.token_hash(raw),
        prefix=raw[: tokens.DISPLAY_CHARS],
        scopes=" ".join(wanted),
        expires_at=expires_at,
    )
    audit_record(
        actor=user,
        action="playground.apitoken.create",
        target_type="apitoken",
        target_id=token.pk,
        detail={
            "name": token.name,
            "prefix": token.prefix,
            "scopes": wanted,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
        request=request,
    )
    return token, raw


def _scopes(scopes: Iterable[str]) -> list[str]:
    wanted = sorted(set(scopes))
    unknown = [s for s in wanted if s not in Scope.values]
    if unknown:
        raise TokenError(f"scopes: unknown {', '.join(unknown)}; choose from {Scope.values}.")
    if not wanted:
        raise TokenError(f"scopes: choose at least one of {Scope.values}.")
    return wanted


@transaction.atomic
def token_revoke(*, user: Any, token_id: int, request: HttpRequest | None = None) -> bool:
    """The owner revokes their token, an admin anyone's. Revoked at once in this process;
    other web processes stop accepting it within PLAYGROUND_AUTH_CACHE_S (their in-memory
    copy expires)."""
    active = ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True)
    if not has_role(user, Role.ADMIN):
        active = active.filter(user=user)
    found = active.values_list("token_hash", "user__username").first()
    changed = active.update(revoked_at=timezone.now())
    if changed and found:
        digest, owner = found
        transaction.on_commit(lambda: token_callers.forget(str(digest)))
        audit_record(
            actor=user,
            action="playground.apitoken.revoke",
            target_type="apitoken",
            target_id=token_id,
            detail={"owner": owner},
            request=request,
        )
    return changed == 1


def run_browser_timings_set(*, user: Any, run_id: int, timings: dict[str, Any]) -> bool:
    clean = {k: timings[k] for k in BROWSER_TIMING_KEYS if _number_or_none(timings.get(k))}
    return PlaygroundRun.objects.filter(pk=run_id, user=user).update(browser_timings=clean) == 1


def _number_or_none(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

"""Write paths of the playground page: personal API tokens and the browser's timings of a run."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from controlpanel.audit import audit_record
from playground import tokens
from playground.gateway.access import token_callers
from playground.models import ApiToken, PlaygroundRun

BROWSER_TIMING_KEYS = ("ttft_ms", "duration_ms", "tokens_per_s", "completion_tokens", "chunks")


@transaction.atomic
def token_create(
    *, user: Any, name: str, request: HttpRequest | None = None
) -> tuple[ApiToken, str]:
    """A new token and its one-time plain text."""
    raw = tokens.token_new()
    token = ApiToken.objects.create(
        user=user,
        name="".join(c for c in name if c.isprintable()).strip()[:100] or "token",
        token_hash=tokens.token_hash(raw),
        prefix=raw[: tokens.DISPLAY_CHARS],
    )
    audit_record(
        actor=user,
        action="playground.apitoken.create",
        target_type="apitoken",
        target_id=token.pk,
        detail={"name": token.name, "prefix": token.prefix},
        request=request,
    )
    return token, raw


@transaction.atomic
def token_revoke(*, user: Any, token_id: int, request: HttpRequest | None = None) -> bool:
    """Revoked at once in this process; other web processes stop accepting it within
    PLAYGROUND_AUTH_CACHE_S (their in-memory copy expires)."""
    active = ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True)
    digest = active.values_list("token_hash", flat=True).first()
    changed = active.update(revoked_at=timezone.now())
    if changed:
        transaction.on_commit(lambda: token_callers.forget(str(digest)))
        audit_record(
            actor=user,
            action="playground.apitoken.revoke",
            target_type="apitoken",
            target_id=token_id,
            request=request,
        )
    return changed == 1


def run_browser_timings_set(*, user: Any, run_id: int, timings: dict[str, Any]) -> bool:
    clean = {k: timings[k] for k in BROWSER_TIMING_KEYS if _number_or_none(timings.get(k))}
    return PlaygroundRun.objects.filter(pk=run_id, user=user).update(browser_timings=clean) == 1


def _number_or_none(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

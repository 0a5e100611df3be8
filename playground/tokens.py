"""Personal API tokens: `sb-` + 43 url-safe characters; only the SHA-256 is stored.

A token carries scopes (playground.models.Scope) and an optional expiry; the user's role
still bounds what it does.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from playground.models import ApiToken, Scope

PREFIX = "sb-"
DISPLAY_CHARS = 10
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_new() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_for(raw: str) -> ApiToken | None:
    """The live token (not revoked, not expired, its user active) with its user, or None.
    `last_used_at` moves once a minute at most: one UPDATE a minute, not one a request."""
    if not raw.startswith(PREFIX):
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=token_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is None:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def token_user(raw: str, *, scope: str = Scope.INFER) -> Any | None:
    """The user of a live token that holds `scope`, or None."""
    token = token_for(raw)
    return token.user if token is not None and token.allows(scope) else None

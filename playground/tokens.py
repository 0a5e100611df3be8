"""Personal API tokens: `sb-` + 43 url-safe characters; only the SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.utils import timezone

from playground.models import ApiToken

PREFIX = "sb-"
DISPLAY_CHARS = 10
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_new() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_user(raw: str) -> Any | None:
    """The active user of an active token, or None. `last_used_at` moves once a minute at most."""
    if not raw.startswith(PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=token_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user

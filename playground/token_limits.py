"""A token's own /v1/ limits: requests per minute, tokens per day and concurrent requests, each
blank (the global setting) or a number. Its owner may set the rates up to the global ceiling; an
admin may set any. Concurrency is bounded for everyone by PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING,
the admin's setting. The gateway reads them with the token (gateway.ratelimit.limits_of,
gateway.limits.concurrency_of)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role, has_role
from playground.gateway.access import token_callers
from playground.models import ApiToken

RPM_MAX = 10_000_000
TOKENS_PER_DAY_MAX = 10**12


class LimitError(ValueError):
    """Limits that cannot be set as asked; the message names the field and the ceiling."""


def ceilings() -> dict[str, int]:
    """The global per-token settings (0: no limit) that bound what an owner may set."""
    return {
        "rpm_limit": settings.GATEWAY_RPM_PER_TOKEN,
        "tokens_per_day_limit": settings.GATEWAY_TOKENS_PER_DAY_PER_TOKEN,
    }


LABELS = {
    "rpm_limit": "requests per minute",
    "tokens_per_day_limit": "tokens per day",
    "max_concurrent": "concurrent requests",
}


def concurrency_ceiling() -> int:
    return int(settings.PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING)


def parse_concurrency(raw: Any) -> int | None:
    """Blank: None (PLAYGROUND_MAX_CONCURRENT); else 1 to the admin's ceiling, for everyone."""
    text = str(raw if raw is not None else "").strip()
    if not text:
        return None
    top = concurrency_ceiling()
    if not text.isdigit() or not 1 <= int(text) <= top:
        raise LimitError(
            f"max_concurrent: give {LABELS['max_concurrent']} as a whole number from 1 to {top:,} "
            "(PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING), or leave it blank for "
            f"{settings.PLAYGROUND_MAX_CONCURRENT}."
        )
    return int(text)


def parse(raw: Any, field: str) -> int | None:
    """Blank: None (the setting); else a whole number of at least 1."""
    text = str(raw if raw is not None else "").strip().replace(",", "").replace("_", "")
    if not text:
        return None
    top = RPM_MAX if field == "rpm_limit" else TOKENS_PER_DAY_MAX
    if not text.isdigit() or not 1 <= int(text) <= top:
        raise LimitError(
            f"{field}: give {LABELS[field]} as a whole number from 1 to {top:,}, or leave it "
            "blank for the global setting."
        )
    return int(text)


def check(user: Any, wanted: dict[str, int | None]) -> None:
    """An owner stays within the global ceiling; an admin may go past it."""
    if has_role(user, Role.ADMIN):
        return
    for field, ceiling in ceilings().items():
        value = wanted.get(field)
        if ceiling and value is not None and value > ceiling:
            raise LimitError(
                f"{field}: at most {ceiling:,} {LABELS[field]} (the global limit per token); "
                "going past it needs the Admin role."
            )


@transaction.atomic
def limits_set(
    *,
    user: Any,
    token_id: int,
    rpm_limit: int | None,
    tokens_per_day_limit: int | None,
    max_concurrent: int | None = None,
    request: HttpRequest | None = None,
) -> ApiToken:
    """Set a token's limits: its owner's token, or any token for an admin. Other web
    processes see the change within PLAYGROUND_AUTH_CACHE_S, as a revocation."""
    rows = ApiToken.objects.select_for_update().filter(pk=token_id, revoked_at__isnull=True)
    if not has_role(user, Role.ADMIN):
        rows = rows.filter(user=user)
    token = rows.select_related("user").first()
    if token is None:
        raise LimitError("No such active token of yours.")
    wanted = {"rpm_limit": rpm_limit, "tokens_per_day_limit": tokens_per_day_limit}
    check(user, wanted)
    if max_concurrent is not None and not 1 <= max_concurrent <= concurrency_ceiling():
        raise LimitError(f"max_concurrent: at most {concurrency_ceiling():,} for any token.")
    token.rpm_limit, token.tokens_per_day_limit = rpm_limit, tokens_per_day_limit
    token.max_concurrent = max_concurrent
    token.save(update_fields=["rpm_limit", "tokens_per_day_limit", "max_concurrent"])
    digest = token.token_hash
    transaction.on_commit(lambda: token_callers.forget(digest))
    audit_record(
        actor=user,
        action="playground.apitoken.limits",
        target_type="apitoken",
        target_id=token.pk,
        # "per_day", not "tokens_per_day": the audit masks any key that names a token
        detail={
            "owner": token.user.get_username(),
            "requests_per_minute": rpm_limit,
            "per_day": tokens_per_day_limit,
            "max_concurrent": max_concurrent,
        },
        request=request,
    )
    return token


def effective(token: ApiToken) -> dict[str, str]:
    """What the Tokens page shows: the token's own limit, or the setting it falls back to."""
    out = {}
    for field, ceiling in ceilings().items():
        own = getattr(token, field)
        if own is not None:
            out[field] = f"{own:,}"
        else:
            out[field] = f"{ceiling:,} (global)" if ceiling else "none (global)"
    own_slots = token.max_concurrent
    default_slots = settings.PLAYGROUND_MAX_CONCURRENT
    out["max_concurrent"] = f"{own_slots:,}" if own_slots else f"{default_slots} (global)"
    return out


@transaction.atomic
def models_set(
    *, user: Any, token_id: int, models: str, request: HttpRequest | None = None
) -> ApiToken:
    """Set a token's model list: its owner's token, or any for an admin."""
    rows = ApiToken.objects.select_for_update().filter(pk=token_id, revoked_at__isnull=True)
    if not has_role(user, Role.ADMIN):
        rows = rows.filter(user=user)
    token = rows.select_related("user").first()
    if token is None:
        raise LimitError("No such active token of yours.")
    token.allowed_models = models
    token.save(update_fields=["allowed_models"])
    digest = token.token_hash
    transaction.on_commit(lambda: token_callers.forget(digest))
    audit_record(
        actor=user,
        action="playground.apitoken.models",
        target_type="apitoken",
        target_id=token.pk,
        detail={"owner": token.user.get_username(), "models": models.split()},
        request=request,
    )
    return token

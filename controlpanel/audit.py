"""The one write path for audit rows. Secrets are scrubbed before anything is stored."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest

from controlpanel.models import AuditEvent

_SECRET_KEY = re.compile(r"(pass(word)?|secret|token|api[_-]?key|authorization)", re.IGNORECASE)
# A flag whose last word names a secret: --api-key, --hf-token, --password; not --tokenizer
# nor --max-num-batched-tokens, whose values are figures worth keeping.
_SECRET_FLAG = re.compile(
    r"^--?(?:[\w-]*[-_])?(?:api[-_]?key|key|token|secret|pass(?:word|wd)?|authorization)$",
    re.IGNORECASE,
)
MASK = "***"


def scrub(value: Any) -> Any:
    """A copy of `value` with every secret-looking key's value masked, at any depth, and NUL
    characters spelled out: PostgreSQL stores none, and a row that fails is an audit lost."""
    if isinstance(value, dict):
        return {
            _no_nul(str(k)): MASK if _SECRET_KEY.search(str(k)) else scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return _scrub_argv([scrub(v) for v in value])
    if isinstance(value, str):
        return _no_nul(value)
    return value


def _scrub_argv(items: list[Any]) -> list[Any]:
    """A command line's secrets: the word after a secret-looking flag (`--api-key sk-1`) and
    the value of `--hf-token=hf_1`. Engines mask their argv already; this is the backstop."""
    out: list[Any] = []
    hide_next = False
    for item in items:
        if not isinstance(item, str):
            out.append(item)
            hide_next = False
            continue
        flag, sep, _ = item.partition("=")
        secret_flag = bool(_SECRET_FLAG.match(flag))
        if hide_next and not item.startswith("-"):
            out.append(MASK)
        else:
            out.append(f"{flag}={MASK}" if sep and secret_flag else item)
        hide_next = secret_flag and not sep
    return out


def _no_nul(text: str) -> str:
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def client_ip(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


def audit_record(**fields: Any) -> AuditEvent:
    """Write one audit row now: audit_event(**fields), saved."""
    event = audit_event(**fields)
    event.save()
    return event


def audit_event(
    *,
    actor: Any,
    action: str,
    target_type: str = "",
    target_id: str | int = "",
    detail: dict[str, Any] | None = None,
    request: HttpRequest | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """The row audit_record writes, scrubbed and not yet saved (for writers that insert many
    rows at once: playground.gateway.dbwork)."""
    user = actor if getattr(actor, "is_authenticated", False) else None
    name = user.get_username() if user is not None else str((detail or {}).get("username", ""))
    return AuditEvent(
        actor=user,
        actor_name=name[:150],
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        detail=scrub(detail or {}),
        client_ip=ip or client_ip(request),
    )

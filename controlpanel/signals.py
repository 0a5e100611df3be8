"""Django's auth signals are the hook for recording log-ins, log-outs and failed log-ins."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from controlpanel.audit import audit_record


@receiver(user_logged_in)
def _logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    audit_record(
        actor=user, action="auth.login", target_type="user", target_id=user.pk, request=request
    )


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        audit_record(
            actor=user, action="auth.logout", target_type="user", target_id=user.pk, request=request
        )


@receiver(user_login_failed)
def _login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
) -> None:
    username = str(credentials.get("username", ""))[:150]
    audit_record(
        actor=None, action="auth.login_failed", detail={"username": username}, request=request
    )

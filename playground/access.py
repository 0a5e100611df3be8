"""Who is calling the gateway: a personal API token, or the browser session with CSRF."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from controlpanel.roles import Role, has_role
from playground import tokens


class AccessError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


@dataclass(frozen=True, slots=True)
class Caller:
    user: Any
    via: str  # "session" | "token"


def authenticate(request: HttpRequest) -> Caller:
    """The calling operator; raises AccessError (401 unknown caller, 403 too low a role)."""
    caller = _caller(request)
    if not has_role(caller.user, Role.OPERATOR):
        raise AccessError(403, "permission_denied", "the playground needs the Operator role")
    return caller


def _caller(request: HttpRequest) -> Caller:
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        user = tokens.token_user(credential.strip())
        if user is None:
            raise AccessError(401, "invalid_api_key", "invalid or revoked API token")
        return Caller(user, "token")
    user = request.user
    if not user.is_authenticated:
        raise AccessError(
            401, "unauthenticated", "log in, or send 'Authorization: Bearer <your sb- token>'"
        )
    if not csrf_passes(request):
        raise AccessError(403, "csrf_failed", "CSRF check failed: send the X-CSRFToken header")
    return Caller(user, "session")


def _csrf_probe(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
    raise AssertionError("only used as a CSRF-protected callback")


def csrf_passes(request: HttpRequest) -> bool:
    """The CSRF middleware's own check, for views that also accept tokens (csrf_exempt)."""
    check = CsrfViewMiddleware(_csrf_probe)
    return check.process_view(request, _csrf_probe, (), {}) is None

"""Who calls the automation API, and may they: a Bearer API token holding the endpoint's scope,
or the browser's session (with CSRF on writes); either way the user's role as in the UI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.security import SessionAuth as NinjaSessionAuth

from controlpanel.roles import Role, has_role
from playground import tokens
from playground.models import Scope


class ApiError(Exception):
    """An answer other than success: the status and a message saying what to change."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True, slots=True)
class Principal:
    user: Any
    via: str  # "token" | "session"
    token_id: int | None = None


def _check_role(user: Any, role: Role) -> None:
    if not has_role(user, role):
        raise ApiError(403, f"this needs the {role.label} role; your account does not hold it")


class TokenAuth(HttpBearer):
    """`Authorization: Bearer sb-…`: a live token with `scope`, of a user holding `role`."""

    def __init__(self, scope: Scope, role: Role) -> None:
        self.scope, self.role = scope, role
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> Principal:
        found = tokens.token_for(token.strip())
        if found is None:
            raise ApiError(401, "invalid, expired or revoked API token")
        if not found.allows(self.scope):
            raise ApiError(403, f"this API token lacks the {self.scope.value!r} scope")
        _check_role(found.user, self.role)
        return Principal(found.user, "token", found.pk)


class SessionAuth(NinjaSessionAuth):
    """The logged-in browser (CSRF checked on writes by ninja's cookie auth)."""

    def __init__(self, role: Role) -> None:
        self.role = role
        super().__init__(csrf=True)

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:
        if not request.user.is_authenticated:
            return None
        _check_role(request.user, self.role)
        return Principal(request.user, "session")


def access(scope: Scope, role: Role) -> list[Any]:
    """The auth of an endpoint: a token first (a bad one is refused, not passed over), then
    the session."""
    return [TokenAuth(scope, role), SessionAuth(role)]


def principal(request: HttpRequest) -> Principal:
    found = getattr(request, "auth", None)
    if not isinstance(found, Principal):  # every endpoint declares access(); a guard, not a path
        raise ApiError(401, "not authenticated")
    return found


READ = access(Scope.READ, Role.VIEWER)
DEPLOY = access(Scope.DEPLOY, Role.OPERATOR)
AUDIT = access(Scope.AUDIT, Role.ADMIN)
USAGE = access(Scope.READ, Role.OPERATOR)  # as the Usage page

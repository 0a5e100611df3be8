"""Who is calling the gateway: a personal API token, or the browser session with CSRF.

The gateway may run without Django's middleware (playground.gateway.asgi): the session and
its user are then loaded here with Django's own session store and `auth.get_user`, as
SessionMiddleware and AuthenticationMiddleware would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from controlpanel.roles import Role, has_role
from playground import model_allowlist, tokens
from playground.gateway import dbwork
from playground.gateway.cache import TtlCache
from playground.models import Scope


class AccessError(Exception):
    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        retry_after_s: int | None = None,
        parent: str = "",
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.retry_after_s = retry_after_s  # a Retry-After header (a deployment still waking)
        self.parent = parent  # an adapter's deployment: the one a request wakes


@dataclass(frozen=True, slots=True)
class Caller:
    user: Any
    via: str  # "session" | "token"
    # The token's own limits (ApiToken.rpm_limit, tokens_per_day_limit); None: the setting.
    rpm_limit: int | None = None
    tokens_per_day_limit: int | None = None
    # The token's expiry (epoch seconds), checked on every use: an expiry is known in advance,
    # so unlike a revocation it needs no age bound of the cache to take effect.
    expires_ts: float | None = None
    # The token's own concurrent-request limit (ApiToken.max_concurrent); None: the setting.
    max_concurrent: int | None = None
    # The models it may use (its token's and its teams' lists: playground.model_allowlist);
    # None: any.
    models: frozenset[str] | None = None


def auth_cache_s() -> float:
    return settings.PLAYGROUND_AUTH_CACHE_S


# token hash → an operator's Caller; only callers that passed every check are kept.
token_callers: TtlCache[str, Caller] = TtlCache(ttl_s=auth_cache_s)


async def authenticate_async(request: HttpRequest) -> Caller:
    """`authenticate`, answered from memory for a bearer token seen in the last few seconds."""
    credential = bearer_credential(request)
    if credential is None:
        return await dbwork.in_thread(authenticate, request)
    key = tokens.token_hash(credential)
    caller = await token_callers.get_or_load(key, lambda: dbwork.in_thread(authenticate, request))
    return _unexpired(key, caller)


async def identify_async(request: HttpRequest) -> Caller:
    """`authenticate_async` less the CSRF check: what the gateway's handler asks before it reads
    a body (a form's CSRF token may be in it), so that a stranger's body is never read."""
    credential = bearer_credential(request)
    if credential is None:
        return await dbwork.in_thread(identify, request)
    key = tokens.token_hash(credential)
    caller = await token_callers.get_or_load(key, lambda: dbwork.in_thread(authenticate, request))
    return _unexpired(key, caller)


def _unexpired(key: str, caller: Caller) -> Caller:
    if caller.expires_ts is not None and time.time() >= caller.expires_ts:
        token_callers.forget(key)
        raise AccessError(401, "invalid_api_key", "invalid, expired or revoked API token")
    return caller


def identify(request: HttpRequest) -> Caller:
    return authenticate(request, csrf=False)


def authenticate(request: HttpRequest, *, csrf: bool = True) -> Caller:
    """The calling operator; raises AccessError (401 unknown caller, 403 too low a role)."""
    caller = _caller(request, csrf=csrf)
    if not has_role(caller.user, Role.OPERATOR):
        raise AccessError(403, "permission_denied", "the playground needs the Operator role")
    return caller


def bearer_credential(request: HttpRequest) -> str | None:
    # META, not request.headers: that builds a dict of every header, per request (profiled)
    scheme, _, credential = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() == "bearer":
        return str(credential).strip()
    # Anthropic's clients send their key as `x-api-key` (a header no browser adds on its own,
    # so it needs no CSRF check either).
    key: str = request.META.get("HTTP_X_API_KEY", "")
    return key.strip() or None


def _caller(request: HttpRequest, *, csrf: bool) -> Caller:
    credential = bearer_credential(request)
    if credential is not None:
        token = tokens.token_for(credential)
        if token is None:
            raise AccessError(401, "invalid_api_key", "invalid, expired or revoked API token")
        if not token.allows(Scope.INFER):
            raise AccessError(
                403, "permission_denied", "this API token lacks the 'infer' scope that /v1/ needs"
            )
        expires_ts = token.expires_at.timestamp() if token.expires_at else None
        return Caller(
            token.user,
            "token",
            token.rpm_limit,
            token.tokens_per_day_limit,
            expires_ts,
            token.max_concurrent,
            model_allowlist.allowed(token.user, token.allowed_models),
        )
    user = session_user(request)
    if not user.is_authenticated:
        raise AccessError(
            401, "unauthenticated", "log in, or send 'Authorization: Bearer <your sb- token>'"
        )
    if csrf and not csrf_passes(request):
        raise AccessError(403, "csrf_failed", "CSRF check failed: send the X-CSRFToken header")
    return Caller(user, "session", models=model_allowlist.allowed(user))


def session_user(request: HttpRequest) -> Any:
    """request.user, loaded the way Django's session and auth middlewares load it if absent."""
    if not hasattr(request, "user"):
        if not hasattr(request, "session"):
            store = import_module(settings.SESSION_ENGINE).SessionStore
            request.session = store(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
        request.user = auth.get_user(request)
    return request.user


def _csrf_probe(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
    raise AssertionError("only used as a CSRF-protected callback")


def csrf_passes(request: HttpRequest) -> bool:
    """The CSRF middleware's own check, for views that also accept tokens (csrf_exempt)."""
    check = CsrfViewMiddleware(_csrf_probe)
    check.process_request(request)
    return check.process_view(request, _csrf_probe, (), {}) is None

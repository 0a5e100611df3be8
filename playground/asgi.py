"""The /v1/ gateway as its own lean Django ASGI handler, in front of the full one.

Django's middlewares are synchronous: through the full stack every gateway request made
about 16 thread hops before its first byte (measured: bench/proxy_overhead.py). The gateway
needs none of them: its views authenticate themselves (token, or session + CSRF through
Django's own session store, `auth.get_user` and CSRF check: playground.access). This handler
keeps the rest of Django (URL resolution, the same views, exception handling, signals) and
adds what those middlewares would have added to an API response: the allowed-hosts check
and the security headers.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.http import HttpRequest, HttpResponseBase, JsonResponse

PREFIX = "/v1/"


class GatewayHandler(ASGIHandler):
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # No per-request ThreadSensitiveContext: it starts a thread for every request only to
        # run the request signals' receivers; they share asgiref's one sync thread instead.
        await self.handle(scope, receive, send)

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        self._middleware_chain = convert_exception_to_response(self._lean)

    async def _lean(self, request: HttpRequest) -> HttpResponseBase:
        try:
            request.get_host()  # DisallowedHost → 400, as CommonMiddleware would answer
            response = await self._get_response_async(request)
        except Exception as exc:  # Django logs it and picks the status; the body is an API's
            response = as_api_error(response_for_exception(request, exc))
        response.setdefault("X-Content-Type-Options", "nosniff")
        response.setdefault("X-Frame-Options", settings.X_FRAME_OPTIONS)
        if settings.SECURE_REFERRER_POLICY:
            response.setdefault("Referrer-Policy", settings.SECURE_REFERRER_POLICY)
        return response


API_ERRORS = {400: "invalid_request_error", 403: "permission_error", 404: "not_found_error"}


def as_api_error(response: HttpResponseBase) -> HttpResponseBase:
    """An OpenAI-style JSON error instead of Django's HTML error page (no traceback, ever)."""
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    status = response.status_code
    message = "Not found." if status == 404 else response.reason_phrase or "Error."
    if status >= 500:
        message = "Internal error in Shardboard's gateway; it is logged on the server."
    kind = API_ERRORS.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return JsonResponse({"error": {"message": message, "type": kind}}, status=status)


def with_gateway(django_app: Any) -> Any:
    """An ASGI app: /v1/… through the lean handler, everything else through `django_app`."""
    gateway_app = GatewayHandler()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        if scope["type"] == "http" and path.startswith(PREFIX):
            await gateway_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return app

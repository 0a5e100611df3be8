"""Every refusal as JSON `{"message": …}` naming what to change, never a 500 or a traceback.
Validation errors name the field (`body.replicas: …`) and keep ninja's list under `errors`."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from controlpanel.api.auth import ApiError
from deployments.lifecycle.services import DeploymentError

UNAUTHENTICATED = "send 'Authorization: Bearer <your sb- token>' or log in"


def install(api: NinjaAPI) -> None:
    def answer(request: HttpRequest, status: int, message: str, **extra: Any) -> HttpResponse:
        return api.create_response(request, {"message": message, **extra}, status=status)

    def api_error(request: HttpRequest, exc: Any) -> HttpResponse:
        return answer(request, exc.status, exc.message)

    def deployment_error(request: HttpRequest, exc: Any) -> HttpResponse:
        return answer(request, 409, str(exc))

    def not_found(request: HttpRequest, exc: Any) -> HttpResponse:
        return answer(request, 404, str(exc) or "not found")

    def auth_error(request: HttpRequest, exc: Any) -> HttpResponse:
        return answer(request, 401, UNAUTHENTICATED)

    def http_error(request: HttpRequest, exc: Any) -> HttpResponse:
        return answer(request, exc.status_code, str(exc))

    def invalid(request: HttpRequest, exc: Any) -> HttpResponse:
        return answer(request, 422, validation_message(exc.errors), errors=_plain(exc.errors))

    api.add_exception_handler(ApiError, api_error)
    api.add_exception_handler(DeploymentError, deployment_error)
    api.add_exception_handler(Http404, not_found)
    api.add_exception_handler(AuthenticationError, auth_error)
    api.add_exception_handler(HttpError, http_error)
    api.add_exception_handler(ValidationError, invalid)


def validation_message(errors: list[dict[str, Any]]) -> str:
    """`query.page: Input should be greater than 0` for the first error, and how many more."""
    if not errors:
        return "invalid request"
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    # ninja puts the parameter's name after "body": body.body.replicas reads as body.replicas
    where = ".".join(p for i, p in enumerate(loc) if i == 0 or p != loc[i - 1])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where or 'request'}: {first.get('msg', 'invalid')}{more}"


def _plain(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors without pydantic's `ctx` and `input`: they may hold exceptions and the
    caller's own values, neither of which belongs in an answer."""
    return [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in errors]

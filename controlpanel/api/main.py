"""The automation API, version 1: one NinjaAPI under /api/v1/, its OpenAPI schema at
/api/v1/openapi.json and its docs page at /api/v1/docs (Swagger UI from our own static files:
ninja's templates use its bundled copy when "ninja" is an installed app)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver
from ninja import NinjaAPI

from controlpanel.api import adapters, audit, autoscale, deployments, errors, fleet
from controlpanel.api.auth import READ, ApiError, SessionAuth, TokenAuth
from controlpanel.roles import Role
from playground.models import Scope

VERSION = "1"


def _schema_access(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and its docs page: a viewer's session, or a token with the read scope."""

    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            who = TokenAuth(Scope.READ, Role.VIEWER)(request) or SessionAuth(Role.VIEWER)(request)
        except ApiError as exc:
            return JsonResponse({"message": exc.message}, status=exc.status)
        if who is None:
            if "text/html" in request.headers.get("Accept", ""):
                return redirect_to_login(request.get_full_path())
            return JsonResponse({"message": errors.UNAUTHENTICATED}, status=401)
        return view(request, *args, **kwargs)

    return checked


class ShardboardApi(NinjaAPI):
    def get_openapi_schema(self, **kwargs: Any) -> Any:
        """ninja's schema, each operation's description ending with the scope and role it
        needs, read from the operation's own auth: the docs cannot drift from the checks."""
        schema = super().get_openapi_schema(**kwargs)
        needs = _needs()
        for item in schema["paths"].values():
            for op in item.values():
                if rule := needs.get(op["operationId"]):
                    op["description"] = f"{op.get('description', '')}\n\n{rule}".strip()
        return schema


def _needs() -> dict[str, str]:
    out = {}
    for router in (
        deployments.router,
        adapters.router,
        autoscale.router,
        fleet.router,
        audit.router,
    ):
        for path_view in router.path_operations.values():
            for op in path_view.operations:
                token = next(a for a in op.auth_callbacks if isinstance(a, TokenAuth))
                out[api.get_openapi_operation_id(op)] = (
                    f"Needs a token with the `{token.scope.value}` scope (or a session), "
                    f"and the {token.role.label} role."
                )
    return out


api = ShardboardApi(
    title="Shardboard API",
    version=VERSION,
    description=(
        "Automation for Shardboard: plan, launch, stop and scale deployments; hosts and GPUs; "
        "the audit trail; usage. Send 'Authorization: Bearer <sb- token>' with the scope each "
        "operation names (read, deploy, audit), or use a logged-in session (CSRF on writes). "
        "The user's role bounds every token, as in the UI."
    ),
    urls_namespace="api-v1",
    # Every operation names its own; this default also tells the docs page to send the CSRF
    # token, so "Try it out" works from a logged-in session.
    auth=READ,
    docs_decorator=_schema_access,
)
errors.install(api)
api.add_router("/", deployments.router)
api.add_router("/", adapters.router)
api.add_router("/", autoscale.router)
api.add_router("/", fleet.router)
api.add_router("/", audit.router)


def _index(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    return JsonResponse(
        {"version": VERSION, "openapi": "openapi.json", "docs": "docs", "message": "ok"}
    )


def urlpatterns() -> list[URLPattern | URLResolver]:
    """ninja's URLs, each answering for itself (401/403 as JSON) rather than through the
    site's login redirect; the root answers with where the schema is."""
    patterns, _, _ = api.urls
    for entry in patterns:
        if isinstance(entry, URLPattern):
            if entry.name == "api-root":
                entry.callback = _schema_access(_index)
            entry.callback.login_required = False  # type: ignore[attr-defined]
    return patterns

"""The playground page, its small JSON endpoints, and the OpenAI-compatible /v1/ gateway."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import Role, role_required
from playground import model_allowlist, selectors, services, token_limits
from playground.gateway import targets
from playground.token_forms import TokenForm


@role_required(Role.OPERATOR)
@require_GET
def playground_index(request: HttpRequest) -> HttpResponse:
    user = request.user
    runs = [selectors.run_payload(run) for run in selectors.runs_of(user=user)]
    usable = targets.models_usable(user=user)
    context = {
        # the playground chats and completes: an embedding model is named, not offered
        "deployments": [d for d in usable if not d.embeds],
        "embedding_deployments": [d for d in usable if d.embeds],
        "tokens": list(selectors.tokens_of(user=user)),
        "runs": runs,
        "max_tokens_cap": settings.PLAYGROUND_MAX_TOKENS,
        "gateway_base": request.build_absolute_uri("/v1"),
    }
    return render(request, "playground/index.html", context)


@role_required(Role.OPERATOR)
@require_GET
def runs_json(request: HttpRequest) -> JsonResponse:
    runs = [selectors.run_payload(run) for run in selectors.runs_of(user=request.user)]
    return JsonResponse({"runs": runs})


@role_required(Role.OPERATOR)
@require_POST
def run_browser_timings(request: HttpRequest, run_id: int) -> JsonResponse:
    timings = _json_object(request)
    if not services.run_browser_timings_set(user=request.user, run_id=run_id, timings=timings):
        return JsonResponse({"error": {"message": "no such run"}}, status=404)
    return JsonResponse({"ok": True})


@role_required(Role.OPERATOR)
@require_POST
def token_create(request: HttpRequest) -> JsonResponse:
    name = str(_json_object(request).get("name") or request.POST.get("name") or "")
    token, raw = services.token_create(user=request.user, name=name, request=request)
    created = {"id": token.pk, "name": token.name, "prefix": token.prefix, "token": raw}
    return JsonResponse(created, status=201)


@role_required(Role.OPERATOR)
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> JsonResponse:
    if not services.token_revoke(user=request.user, token_id=token_id, request=request):
        return JsonResponse({"error": {"message": "no such active token"}}, status=404)
    return JsonResponse({"revoked": token_id})


NEW_TOKEN_SESSION_KEY = "tokens:new"  # noqa: S105 - a session key, not a secret


@never_cache  # the one page that shows a token's plain text
@role_required(Role.VIEWER)
def tokens_index(request: HttpRequest) -> HttpResponse:
    """The Tokens page. A POST makes a token and redirects (a reload makes no second one);
    the page after it shows the plain text once: it leaves the session as it is shown."""
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            token, raw = services.token_create(
                user=request.user,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_at=form.expires_at(),
                request=request,
            )
        except services.TokenError as exc:
            form.add_error(None, str(exc))
        else:
            request.session[NEW_TOKEN_SESSION_KEY] = {"name": token.name, "raw": raw}
            return redirect("tokens")
    shown = request.session.pop(NEW_TOKEN_SESSION_KEY, None) if request.method == "GET" else None
    shown_tokens = list(selectors.tokens_page(user=request.user))
    context = {
        "form": form,
        "created": shown,
        "tokens": shown_tokens,
        "rows": [(t, token_limits.effective(t)) for t in shown_tokens],
        "ceilings": token_limits.ceilings(),
        "concurrency_ceiling": token_limits.concurrency_ceiling(),
        "api_base": request.build_absolute_uri("/api/v1/"),
    }
    return render(request, "playground/tokens.html", context, status=400 if form.errors else 200)


@role_required(Role.VIEWER)
@require_POST
def tokens_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    if services.token_revoke(user=request.user, token_id=token_id, request=request):
        messages.success(request, "Token revoked: it is refused from now on.")
    else:
        messages.error(request, "No such active token of yours.")
    return redirect("tokens")


@role_required(Role.VIEWER)
@require_POST
def tokens_limits(request: HttpRequest, token_id: int) -> HttpResponse:
    """A token's own /v1/ limits, from the Tokens page (blank: the global setting)."""
    try:
        token = token_limits.limits_set(
            user=request.user,
            token_id=token_id,
            rpm_limit=token_limits.parse(request.POST.get("rpm_limit"), "rpm_limit"),
            tokens_per_day_limit=token_limits.parse(
                request.POST.get("tokens_per_day_limit"), "tokens_per_day_limit"
            ),
            max_concurrent=token_limits.parse_concurrency(request.POST.get("max_concurrent")),
            request=request,
        )
    except token_limits.LimitError as exc:
        messages.error(request, str(exc))
    else:
        shown = token_limits.effective(token)
        messages.success(
            request,
            f"Limits of {token.name}: {shown['rpm_limit']} requests per minute, "
            f"{shown['tokens_per_day_limit']} tokens per day, "
            f"{shown['max_concurrent']} concurrent requests.",
        )
    return redirect("tokens")


@role_required(Role.VIEWER)
@require_POST
def tokens_models(request: HttpRequest, token_id: int) -> HttpResponse:
    """A token's model list, from the Tokens page (blank: any model)."""
    try:
        models = model_allowlist.parse(request.POST.get("allowed_models"))
        token = token_limits.models_set(
            user=request.user, token_id=token_id, models=models, request=request
        )
    except (model_allowlist.AllowlistError, token_limits.LimitError) as exc:
        messages.error(request, str(exc))
    else:
        which = token.allowed_models or "any model"
        messages.success(request, f"{token.name} may use: {which}.")
    return redirect("tokens")


def _json_object(request: HttpRequest) -> dict[str, Any]:
    if request.content_type != "application/json":
        return {}
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}

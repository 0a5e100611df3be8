"""The OpenAI-compatible /v1/ views. They authenticate themselves (a personal API token, or the
browser session with CSRF) instead of Django's login middleware."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from playground.gateway import adapter_targets, followup, proxy, targets
from playground.gateway.access import AccessError, authenticate
from playground.gateway.errors import in_anthropic_shape

View = Callable[[HttpRequest], Coroutine[Any, Any, HttpResponseBase]]


@login_not_required
@csrf_exempt
@require_POST
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await proxy.gateway(request, "chat")


@login_not_required
@csrf_exempt
@require_POST
async def completions(request: HttpRequest) -> HttpResponseBase:
    return await proxy.gateway(request, "completion")


@login_not_required
@csrf_exempt
@require_POST
async def responses(request: HttpRequest) -> HttpResponseBase:
    return await proxy.gateway(request, "responses")


@login_not_required
@require_GET
async def response_get(request: HttpRequest, response_id: str) -> HttpResponseBase:
    return await followup.follow(request, response_id, cancel=False)


@login_not_required
@csrf_exempt
@require_POST
async def response_cancel(request: HttpRequest, response_id: str) -> HttpResponseBase:
    return await followup.follow(request, response_id, cancel=True)


def _anthropic_errors(view: View) -> View:
    """The view's error answers (its 405 too) in Anthropic's shape."""

    @functools.wraps(view)
    async def shaped(request: HttpRequest) -> HttpResponseBase:
        return in_anthropic_shape(await view(request))

    return shaped


@login_not_required
@csrf_exempt
@_anthropic_errors
@require_POST
async def messages(request: HttpRequest) -> HttpResponseBase:
    return await proxy.gateway(request, "messages")


@login_not_required
@csrf_exempt
@_anthropic_errors
@require_POST
async def count_tokens(request: HttpRequest) -> HttpResponseBase:
    return await proxy.gateway(request, "count_tokens")


@login_not_required
@csrf_exempt
@require_POST
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    return await proxy.gateway(request, "embeddings")


@login_not_required
@require_GET
async def models_list(request: HttpRequest) -> JsonResponse:
    try:
        data = await sync_to_async(_models_for)(request)
    except AccessError as exc:
        return proxy.error_response(exc.status, exc.kind, exc.message)
    return JsonResponse({"object": "list", "data": data})


def _models_for(request: HttpRequest) -> list[dict[str, Any]]:
    caller = authenticate(request)
    listed = _deployments(caller.user) + [
        {
            "id": a.name,
            "object": "model",
            "created": int(a.created_at.timestamp()),
            "owned_by": "shardboard",
            "engine": a.deployment.engine,
            "kind": "generation",
            "parent": a.deployment.name,  # vLLM's field for an adapter's base model
            "root": a.source,
        }
        for a in adapter_targets.listed()
    ]
    return [m for m in listed if caller.models is None or m["id"] in caller.models]


def _deployments(user: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": d.name,
            "object": "model",
            "created": int(d.created_at.timestamp()),
            "owned_by": "shardboard",
            "engine": d.engine,
            # Shardboard's own field (OpenAI clients ignore unknown ones): which API it serves
            "kind": "embedding" if d.embeds else "generation",
        }
        for d in targets.models_usable(user=user)
    ]

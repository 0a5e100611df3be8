"""The OpenAI-compatible /v1/ views. They authenticate themselves (a personal API token, or the
browser session with CSRF) instead of Django's login middleware."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from playground.gateway import proxy, targets
from playground.gateway.access import AccessError, authenticate


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
@require_GET
async def models_list(request: HttpRequest) -> JsonResponse:
    try:
        data = await sync_to_async(_models_for)(request)
    except AccessError as exc:
        return proxy.error_response(exc.status, exc.kind, exc.message)
    return JsonResponse({"object": "list", "data": data})


def _models_for(request: HttpRequest) -> list[dict[str, Any]]:
    caller = authenticate(request)
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
        for d in targets.models_usable(user=caller.user)
    ]

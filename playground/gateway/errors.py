"""The gateway's JSON error answers: OpenAI's shape, and Anthropic's for /v1/messages."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponseBase, JsonResponse

from playground.gateway.protocols import anthropic_error_body


def error_response(status: int, kind: str, message: str) -> JsonResponse:
    response = JsonResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="shardboard"'
    return response


def body_too_large_message(limit_bytes: int) -> str:
    return (
        f"the request body is larger than the gateway's limit of {limit_bytes:,} bytes "
        "(PLAYGROUND_MAX_BODY_BYTES)"
    )


def body_too_large(limit_bytes: int) -> JsonResponse:
    return error_response(413, "request_too_large", body_too_large_message(limit_bytes))


def in_anthropic_shape(response: HttpResponseBase) -> HttpResponseBase:
    """An error answer in Anthropic's shape ({"type": "error", "error": {type, message}}),
    its status and headers (Retry-After, WWW-Authenticate) kept; any other answer as it is."""
    if response.status_code < 400:
        return response
    body: Any = {}
    if response.get("Content-Type", "").startswith("application/json"):
        try:
            body = json.loads(response.content)  # type: ignore[attr-defined]  # not streamed
        except (AttributeError, ValueError):
            body = {}
    if not isinstance(body, dict) or body.get("type") == "error":  # already Anthropic's
        return response
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    shaped = JsonResponse(
        anthropic_error_body(response.status_code, str(message or response.reason_phrase)),
        status=response.status_code,
    )
    for header, value in response.items():
        if header.lower() not in ("content-type", "content-length"):
            shaped[header] = value
    return shaped

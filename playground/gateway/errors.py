"""The gateway's JSON error answers, OpenAI's shape."""

from __future__ import annotations

from django.http import JsonResponse


def error_response(
    status: int, kind: str, message: str, retry_after_s: int | None = None
) -> JsonResponse:
    response = JsonResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="shardboard"'
    if retry_after_s is not None:
        response["Retry-After"] = str(retry_after_s)
    return response


def body_too_large_message(limit_bytes: int) -> str:
    return (
        f"the request body is larger than the gateway's limit of {limit_bytes:,} bytes "
        "(PLAYGROUND_MAX_BODY_BYTES)"
    )


def body_too_large(limit_bytes: int) -> JsonResponse:
    return error_response(413, "request_too_large", body_too_large_message(limit_bytes))

"""What the gateway's handler decides before it reads a request body: whether the body is too
large and whether its sender may send one at all. A stranger's 50 MB is never read, let alone
spooled to disk, on the way to its 401."""

from __future__ import annotations

import tempfile
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.http import HttpRequest, HttpResponseBase

from controlpanel.bodylimit import declared_length
from playground.gateway.access import AccessError, identify_async
from playground.gateway.errors import body_too_large, error_response


def sends_body(scope: dict[str, Any]) -> bool:
    length = declared_length(scope)
    if length is not None:
        return length > 0
    return any(name.lower() == b"transfer-encoding" for name, _ in scope.get("headers", ()))


def empty_body() -> Any:
    return tempfile.SpooledTemporaryFile(  # closed by the handler
        max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b"
    )


async def refusal_before_body(request: HttpRequest) -> HttpResponseBase | None:
    """The 401/403 of a caller who may not use the gateway, before its body is read."""
    try:
        await identify_async(request)
    except AccessError as exc:
        return error_response(exc.status, exc.kind, exc.message)
    return None


async def read_body_into(receive: Any, body_file: Any, limit_bytes: int) -> HttpResponseBase | None:
    """Read the body into `body_file`; a 413 as soon as it passes `limit_bytes` (the rest is
    not read). Raises RequestAborted when the client goes away."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestAborted()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit_bytes:
            return body_too_large(limit_bytes)
        body_file.write(chunk)
        if not message.get("more_body", False):
            break
    body_file.seek(0)
    return None

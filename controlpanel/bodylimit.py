"""A ceiling on request bodies for the site's pages, applied before Django reads them.

Django reads a whole request body (spooling it to disk past FILE_UPLOAD_MAX_MEMORY_SIZE) before
any middleware runs, so an anonymous client could make every web process write gigabytes on
the way to a login redirect. The site's forms are small: a body over Django's own
DATA_UPLOAD_MAX_MEMORY_SIZE is answered 413 here, at once when its Content-Length says so, or
as soon as a chunked body passes it. The /v1/ gateway has its own, larger limit and checks the
caller before it reads anything (playground.gateway.gate).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings


def declared_length(scope: dict[str, Any]) -> int | None:
    """The Content-Length the client declared; None without one (chunked, or no body)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            return int(value) if value.strip().isdigit() else None
    return None


def limit_bodies(app: Any) -> Any:
    """`app`, behind the ceiling (HTTP only; settings.DATA_UPLOAD_MAX_MEMORY_SIZE None: off)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if scope["type"] != "http" or limit is None:
            await app(scope, receive, send)
            return
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            await send_too_large(send, limit)
            return
        if declared is not None:  # the server reads no more than it declared
            await app(scope, receive, send)
            return
        await _counted(app, scope, receive, send, limit)

    return guarded


async def _counted(app: Any, scope: dict[str, Any], receive: Any, send: Any, limit: int) -> None:
    """A chunked body: past `limit`, the 413 is sent and the app is told the client left."""
    received = 0
    refused = False

    async def counting_receive() -> dict[str, Any]:
        nonlocal received, refused
        if refused:
            return {"type": "http.disconnect"}
        message: dict[str, Any] = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                refused = True
                await send_too_large(send, limit)
                return {"type": "http.disconnect"}
        return message

    async def quiet_send(message: dict[str, Any]) -> None:
        if not refused:  # the 413 was the answer
            await send(message)

    await app(scope, counting_receive, quiet_send)


async def send_too_large(send: Any, limit: int) -> None:
    body = f"Request body too large: this server takes at most {limit:,} bytes.\n".encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})

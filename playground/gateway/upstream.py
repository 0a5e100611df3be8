"""The engine side of the gateway: JSON POSTs to the engines through aiohttp's client.

playground.gateway.engine_client holds the session (one per event loop, keep-alive connections
per origin) and turns aiohttp's errors into EngineIOError's kinds; here they become the
gateway's answers (UpstreamError: status, kind, message).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from yarl import URL

from playground.gateway.engine_client import (
    Answer,
    ConnectError,
    ConnectTimeout,
    EngineIOError,
    ReadTimeout,
    get,
    post,
)

ERROR_BODY_MAX_BYTES = 64 * 1024
USER_AGENT = "shardboard-gateway"


def read_timeout_s() -> float:
    return settings.PLAYGROUND_READ_TIMEOUT_S


def connect_timeout_s() -> float:
    return settings.PLAYGROUND_CONNECT_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class Target:
    """Where a deployment's engine answers, and how to talk to it."""

    deployment_id: int
    name: str
    engine: str
    base_url: str
    served_model: str | None
    api_key: str | None = field(default=None, repr=False)
    adapter: str = ""  # a LoRA adapter's name (served_model then) on deployment `name`


class UpstreamError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


async def open_response(target: Target, path: str, body: dict[str, Any]) -> Answer:
    """The engine's answer, headers read and body not yet; an engine error raises."""
    try:
        url, headers = request_parts(target.base_url, path, target.api_key)
    except ValueError as exc:
        raise UpstreamError(502, "engine_error", f"engine of {target.name}: {exc}") from None
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        answer = await post(
            url,
            headers,
            payload.encode(),
            connect_timeout_s=connect_timeout_s(),
            read_timeout_s=read_timeout_s(),
        )
    except EngineIOError as exc:
        raise transport_error(target, exc) from exc
    if answer.status_code >= 400:
        raise await engine_error(target, answer)
    return answer


async def open_get(target: Target, path: str, leaf: str) -> Answer:
    """A GET of `path` + "/" + `leaf` (an id and its query, checked by the caller); the URL of
    `path` is the cached one, the leaf is not cached (ids are unique); an engine error raises."""
    try:
        base, headers = request_parts(target.base_url, path, target.api_key)
    except ValueError as exc:
        raise UpstreamError(502, "engine_error", f"engine of {target.name}: {exc}") from None
    url = URL(f"{base}/{leaf}", encoded=True)
    try:
        answer = await get(
            url, headers, connect_timeout_s=connect_timeout_s(), read_timeout_s=read_timeout_s()
        )
    except EngineIOError as exc:
        raise transport_error(target, exc) from exc
    if answer.status_code >= 400:
        raise await engine_error(target, answer)
    return answer


@functools.lru_cache(maxsize=1024)
def request_parts(base_url: str, path: str, api_key: str | None) -> tuple[URL, dict[str, str]]:
    """The URL of a JSON POST to the engine and its headers (made once per engine and path)."""
    if any(c in part for part in (base_url, path, api_key or "") for c in "\r\n\0"):
        raise ValueError("an engine's address or key holds a line break")  # no header injection
    url = urlsplit(base_url + path)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"engines are reached over plain http://, not {base_url!r}")
    headers = {
        "Accept": "text/event-stream, application/json",
        "User-Agent": USER_AGENT,
        "Content-Type": "application/json",
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    netloc = url.netloc.rpartition("@")[2]  # never user:password@
    target = f"http://{netloc}{url.path}" + (f"?{url.query}" if url.query else "")
    return URL(target, encoded=True), headers  # parsed once, not per request


def transport_error(target: Target, exc: EngineIOError) -> UpstreamError:
    where = f"engine of {target.name} at {target.base_url}"
    if isinstance(exc, ConnectTimeout):
        return UpstreamError(504, "engine_unreachable", f"{where}: connect timed out")
    if isinstance(exc, ConnectError):
        return UpstreamError(502, "engine_unreachable", f"{where} is not reachable: {exc}")
    if isinstance(exc, ReadTimeout):
        return UpstreamError(504, "engine_timeout", f"{where} did not answer in time")
    return UpstreamError(502, "engine_error", f"{where} failed: {exc!r}")


async def engine_error(target: Target, response: Answer) -> UpstreamError:
    try:
        raw = await _read_bounded(response)
    finally:
        await response.aclose()
    status = response.status_code if response.status_code < 500 else 502
    if status == 404 and target.adapter:  # unloaded since this process routed to it
        return UpstreamError(404, "model_not_found", f"adapter {target.adapter!r} is not loaded")
    message = f"engine of {target.name} answered {response.status_code}: {engine_message(raw)}"
    return UpstreamError(status, "engine_error", message)


async def _read_bounded(response: Answer) -> bytes:
    raw = b""
    async for chunk in response:
        raw += chunk
        if len(raw) >= ERROR_BODY_MAX_BYTES:
            break
    return raw[:ERROR_BODY_MAX_BYTES]


def engine_message(raw: bytes) -> str:
    """The human part of an engine's error body (FastAPI `detail`, OpenAI `error.message`)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:2000] or "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("detail", "message", "error"):
            if body.get(key):
                return str(body[key]) if not isinstance(body[key], str) else body[key]
    return json.dumps(body)[:2000]

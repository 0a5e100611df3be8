"""The engine side of the gateway: one shared httpx transport per process (event loop).

httpx2 is the httpx 2 line (the client huggingface_hub already uses). Its transport runs here
on playground.engine_pool's keep-alive connections, each one playground.engine_http's asyncio
protocol with httptools' parser.
"""

from __future__ import annotations

import asyncio
import functools
import json
import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx2
from django.conf import settings

from playground.engine_pool import EnginePool

ERROR_BODY_MAX_BYTES = 64 * 1024
USER_AGENT = "shardboard-gateway"
MAX_IDLE_CONNECTIONS = 64
KEEPALIVE_EXPIRY_S = 5.0

_transports: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EngineTransport] = (
    weakref.WeakKeyDictionary()
)


def read_timeout_s() -> float:
    return settings.PLAYGROUND_READ_TIMEOUT_S


def connect_timeout_s() -> float:
    return settings.PLAYGROUND_CONNECT_TIMEOUT_S


def shared_transport() -> EngineTransport:
    """Keep-alive connections to every engine, reused by every request of this event loop.

    Requests go to the transport itself, not through an httpx2.AsyncClient: the client's
    layers (auth, redirects, cookies, event hooks) do nothing for an engine request and were
    about a tenth of the gateway's CPU per request (bench/proxy_overhead.py)."""
    loop = asyncio.get_running_loop()
    transport = _transports.get(loop)
    if transport is None:
        transport = _transports[loop] = EngineTransport()
    return transport


class EngineTransport(httpx2.AsyncHTTPTransport):
    """httpx's transport on playground.engine_pool's connections (plain HTTP only: engines)."""

    def __init__(  # the parent's __init__ is not called: its pool and TLS context would be
        # built (about 40 ms, on the first request of every process) only to be replaced; the
        # parent's methods use nothing but self._pool.
        self,
        max_idle: int = MAX_IDLE_CONNECTIONS,
        keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S,
    ) -> None:
        self._pool = EnginePool(max_idle=max_idle, keepalive_expiry=keepalive_expiry_s)

    @property
    def pool(self) -> EnginePool:
        return self._pool


@dataclass(frozen=True, slots=True)
class Target:
    """Where a deployment's engine answers, and how to talk to it."""

    deployment_id: int
    name: str
    engine: str
    base_url: str
    served_model: str | None
    api_key: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream, application/json", "User-Agent": USER_AGENT}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


class UpstreamError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


async def open_response(target: Target, path: str, body: dict[str, Any]) -> httpx2.Response:
    """The engine's response, headers read and body not yet; an engine error raises."""
    timeout = httpx2.Timeout(read_timeout_s(), connect=connect_timeout_s(), pool=5.0)
    request = httpx2.Request(
        "POST",
        engine_url(target.base_url, path),
        json=body,
        headers=target.headers(),
        extensions={"timeout": timeout.as_dict()},
    )
    try:
        response = await shared_transport().handle_async_request(request)
    except httpx2.HTTPError as exc:
        raise transport_error(target, exc) from exc
    response.request = request
    if response.status_code >= 400:
        raise await engine_error(target, response)
    return response


@functools.lru_cache(maxsize=1024)
def engine_url(base_url: str, path: str) -> httpx2.URL:
    """Parsed once per engine and path: parsing was about 20 µs of every request."""
    return httpx2.URL(base_url + path)


def transport_error(target: Target, exc: httpx2.HTTPError) -> UpstreamError:
    where = f"engine of {target.name} at {target.base_url}"
    if isinstance(exc, httpx2.ConnectTimeout):
        return UpstreamError(504, "engine_unreachable", f"{where}: connect timed out")
    if isinstance(exc, httpx2.ConnectError):
        return UpstreamError(502, "engine_unreachable", f"{where} is not reachable: {exc}")
    if isinstance(exc, httpx2.TimeoutException):
        return UpstreamError(504, "engine_timeout", f"{where} did not answer in time")
    return UpstreamError(502, "engine_error", f"{where} failed: {exc!r}")


async def engine_error(target: Target, response: httpx2.Response) -> UpstreamError:
    try:
        raw = await _read_bounded(response)
    finally:
        await response.aclose()
    status = response.status_code if response.status_code < 500 else 502
    message = f"engine of {target.name} answered {response.status_code}: {engine_message(raw)}"
    return UpstreamError(status, "engine_error", message)


async def _read_bounded(response: httpx2.Response) -> bytes:
    raw = b""
    async for chunk in response.aiter_raw():
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

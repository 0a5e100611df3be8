"""Helpers of the gateway tests: limits the server starts with, callers' credentials, SSE."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from typing import Any

import httpx
from django.test import Client

from playground import services

GATEWAY_MAX_TOKENS = 64
GATEWAY_MAX_CONCURRENT = 2


def bearer_for(user: Any) -> dict[str, str]:
    _, raw = services.token_create(user=user, name="test")
    return {"Authorization": f"Bearer {raw}"}


def session_for(user: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Cookies and headers of a logged-in browser session, with a matching CSRF pair."""
    client = Client()
    client.force_login(user)
    csrf = secrets.token_hex(16)
    cookies = {"sessionid": client.cookies["sessionid"].value, "csrftoken": csrf}
    return cookies, {"X-CSRFToken": csrf}


def sse_stream(url: str, body: dict[str, Any], headers: dict[str, str], **kw: Any) -> Any:
    return httpx.stream(
        "POST", url, json={**body, "stream": True}, headers=headers, timeout=10, **kw
    )


def sse_data(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


@dataclass(frozen=True)
class RealEngine:
    port: int
    proc: subprocess.Popen[bytes]

"""Helpers of the monitoring tests: hosts with their own Redis keys, history, WebSockets."""

from __future__ import annotations

import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from controlpanel.asgi import application
from monitoring.gpus.simulated import SimulatedBackend
from monitoring.host import worker

SPEC4 = "4xH100-80GB@nvlink"


def unique_host(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def registered(host: str, backend: SimulatedBackend) -> Any:
    from monitoring.models import Host

    worker.register(host, backend)
    return Host.objects.get(name=host)


def fill_history(host: str, backend: SimulatedBackend, seconds: int = 10) -> list[Any]:
    """``seconds`` samples one second apart, ending now, appended as the host worker does."""
    store = worker.history_writer()
    now_ms = time.time_ns() // 1_000_000
    samples = []
    for k in range(seconds, 0, -1):
        sample = backend.sample()
        sample = type(sample)(ts_ms=now_ms - k * 1000, gpus=sample.gpus)
        store.append(host, sample)
        samples.append(sample)
    return samples


ORIGIN = (b"origin", b"http://127.0.0.1")


async def ws_headers(user: Any) -> list[tuple[bytes, bytes]]:
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    return [(b"cookie", f"sessionid={cookie}".encode()), ORIGIN]


async def ws_connect(user: Any, query: str = "") -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, f"/ws/gpus/{query}", headers=await ws_headers(user))
    connected, code = await comm.connect(timeout=5)
    assert connected, code
    return comm


async def ws_next_of(comm: WebsocketCommunicator, kind: str, host: str) -> dict[str, Any]:
    """Skip messages of other hosts (other test runs may publish on the all-GPUs group)."""
    for _ in range(50):
        message = await comm.receive_json_from(timeout=5)
        if message["type"] == kind and message.get("h", host) == host:
            return message
    raise AssertionError(f"no {kind} message for {host}")

"""Tasks every worker answers; used to check that a worker is alive and consuming."""

from __future__ import annotations

import socket

from celery import shared_task


@shared_task(name="controlpanel.ping")
def ping(echo: str = "") -> dict[str, str]:
    return {"pong": echo, "worker_host": socket.gethostname()}

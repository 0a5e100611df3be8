"""Launches racing each other through the real service, one thread (and connection) each."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections

from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create


def race_launches(user: Any, requests: list[LaunchRequest], *, join_s: float = 200) -> list[str]:
    """Every request started at once (a barrier); each outcome "won" or the refusal's text."""
    barrier = threading.Barrier(len(requests))
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(request: LaunchRequest) -> None:
        barrier.wait()
        try:
            deployment_create(user=user, request=request)
            result = "won"
        except DeploymentError as exc:
            result = str(exc)
        finally:
            connections.close_all()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    return outcomes

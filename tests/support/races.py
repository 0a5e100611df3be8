"""Launches racing each other through the real service, one thread (and connection) each."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from deployments import planning
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create


def tiny_launches(
    prefix: str, host: str, count: int, plan: planning.PlanRequest, **fields: Any
) -> list[LaunchRequest]:
    """``count`` launches of the tiny model (``local:0/tiny``) on ``host``, named prefix-0,
    prefix-1...; a field given as a function is called with the launch's index."""
    return [
        LaunchRequest(
            name=f"{prefix}-{i}",
            model_ref="local:0/tiny",
            host_name=host,
            plan_request=plan,
            **{k: v(i) if callable(v) else v for k, v in fields.items()},
        )
        for i in range(count)
    ]


def race_launches(
    user: Any,
    requests: list[LaunchRequest],
    *,
    join_s: float = 200,
    alongside: Callable[[threading.Event], None] | None = None,
) -> list[str]:
    """Every request started at once (a barrier); each outcome, in the requests' order, "won"
    or the refusal's text. ``alongside`` (a watcher) starts at the same barrier and runs until
    the event it is given is set, once every launch has finished."""
    extra = 1 if alongside else 0
    barrier = threading.Barrier(len(requests) + extra)
    outcomes: list[str | None] = [None] * len(requests)
    done = threading.Event()

    def one(i: int, request: LaunchRequest) -> None:
        barrier.wait()
        try:
            deployment_create(user=user, request=request)
            outcomes[i] = "won"
        except DeploymentError as exc:
            outcomes[i] = str(exc)
        finally:
            connections.close_all()

    def watch() -> None:
        assert alongside is not None
        barrier.wait()
        try:
            alongside(done)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(requests)]
    watcher = threading.Thread(target=watch) if alongside else None
    for t in [*threads, *([watcher] if watcher else [])]:
        t.start()
    for t in threads:
        t.join(join_s)
    done.set()
    if watcher:
        watcher.join(10)
    unfinished = [requests[i].name for i, o in enumerate(outcomes) if o is None]
    assert not unfinished, f"launches that did not finish in {join_s} s: {unfinished}"
    return [o for o in outcomes if o is not None]

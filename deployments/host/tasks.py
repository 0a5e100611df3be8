"""Celery tasks on the host queue. They take ids; duplicates and stale rows are no-ops, and a
deployment already in hand in this worker (the sweeper's, or another delivery) is skipped."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from deployments.host import adapters, engine_control, idle, prepare
from deployments.host.downloads import tasks as download_tasks  # noqa: F401  (its tasks)
from deployments.host.ray import cluster
from deployments.host.sweeper import run_claimed


@shared_task(name="deployments.launch", acks_late=True)
def launch(deployment_id: int) -> dict[str, Any]:
    return run_claimed(("start", deployment_id), lambda: engine_control.launch(deployment_id))


@shared_task(name="deployments.stop", acks_late=True)
def stop(deployment_id: int) -> dict[str, Any]:
    return run_claimed(("stop", deployment_id), lambda: engine_control.stop(deployment_id))


@shared_task(name="deployments.restart", acks_late=True)
def restart(deployment_id: int, attempt: int) -> dict[str, Any]:
    return run_claimed(
        ("start", deployment_id), lambda: engine_control.restart(deployment_id, attempt)
    )


@shared_task(name="deployments.adapter_load", acks_late=True)
def adapter_load(placement_id: int) -> dict[str, Any]:
    return run_claimed(("adapter", placement_id), lambda: adapters.load(placement_id))


@shared_task(name="deployments.adapter_unload", acks_late=True)
def adapter_unload(placement_id: int) -> dict[str, Any]:
    return run_claimed(("adapter", placement_id), lambda: adapters.unload(placement_id))


@shared_task(name="deployments.ray_join", acks_late=True)
def ray_join(node_id: int, commit: str = "") -> dict[str, Any]:
    return cluster.join(node_id, commit)


@shared_task(name="deployments.ray_leave", acks_late=True)
def ray_leave(node_id: int) -> dict[str, Any]:
    return cluster.leave(node_id)


@shared_task(name="deployments.wake", acks_late=True)
def wake(deployment_id: int, reason: str = "") -> dict[str, Any]:
    """A sleeping vLLM engine's wake, sent by the gateway's first held request (host.idle)."""
    return idle.wake(deployment_id, reason or "a request arrived")


@shared_task(name="deployments.prepare_engine", acks_late=True)
def prepare_engine(engine: str) -> dict[str, Any]:
    """Prepare an engine of this host again (its preparation failed; an operator retried)."""
    return prepare.retry(engine)

"""How a deployment's engine ends, on the host worker: failed, or restarted after a backoff.

An engine that dies after the deployment has been running is restarted on the same leased
GPUs when the deployment has auto-restart on: `restarting` (an event with the reason and the
attempt), then a `deployments.restart` task after 5 s, 10 s, 20 s ... (capped), at most
SHARDBOARD_RESTART_MAX_ATTEMPTS in a row. A first start that fails is not retried (its
settings are the likely cause). Every move is a compare-and-set, so the watchdog and the
launch task noticing the same exit, or a late restart task, change nothing twice.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlpanel.celery import host_queue
from deployments import events
from deployments.host import diagnosis
from deployments.models import Deployment, GpuLease, Status

log = logging.getLogger(__name__)
STABLE_RUN_S = 600.0  # running this long since the last (re)start: the count starts over


def backend() -> Any:
    try:
        from monitoring.worker import current_backend
    except ImportError:
        return None
    return current_backend()


def detach_simulated(d: Deployment) -> None:
    gpus = backend() if d.host.simulated and d.pid else None
    if gpus is not None and hasattr(gpus, "detach"):
        gpus.detach(d.pid)


def release(d: Deployment) -> None:
    GpuLease.objects.filter(deployment=d, active=True).update(
        active=False, released_at=timezone.now()
    )
    detach_simulated(d)


def diagnosis_detail(found: diagnosis.Diagnosis | None) -> dict[str, Any]:
    if found is None:
        return {}
    return {
        "code": found.code,
        "title": found.title,
        "reason": found.reason,
        "fix": found.fix,
        "matched_line": found.matched_line,
        "suggested_args": [list(a) for a in found.suggested_args],
    }


def fail(d: Deployment, reason: str, found: diagnosis.Diagnosis | None = None) -> bool:
    detail = diagnosis_detail(found)
    with transaction.atomic():
        d.refresh_from_db()
        moved = d.transition(Status.FAILED, reason=reason, failure_reason=reason, diagnosis=detail)
        if moved:
            release(d)
    if moved:
        events.publish(d)
    return moved


def move(d: Deployment, new: Status, reason: str, **fields: Any) -> bool:
    with transaction.atomic():
        moved = d.transition(new, reason=reason, **fields)
    if moved:
        events.publish(d)
    return moved


def backoff_s(attempt: int) -> float:
    """5 s, 10 s, 20 s ... for attempts 1, 2, 3 ..., never more than the cap."""
    base = float(settings.SHARDBOARD_RESTART_BACKOFF_S)
    cap = float(settings.SHARDBOARD_RESTART_BACKOFF_MAX_S)
    return min(cap, base * 2 ** min(max(attempt, 1) - 1, 30))


def next_attempt(d: Deployment) -> int | None:
    """The restart attempt to schedule, or None when the deployment should fail instead."""
    if not d.auto_restart:
        return None
    last_running = d.events.filter(new_status=Status.RUNNING).order_by("-created_at").first()
    if last_running is None:
        return None  # it never ran: a restart would fail the same way
    stable = d.status == Status.RUNNING and (
        timezone.now() - last_running.created_at >= timedelta(seconds=STABLE_RUN_S)
    )
    attempt = 1 if stable else d.restart_count + 1
    return attempt if attempt <= settings.SHARDBOARD_RESTART_MAX_ATTEMPTS else None


def engine_lost(d: Deployment, reason: str, found: diagnosis.Diagnosis | None = None) -> bool:
    """The engine of `d` (as loaded, starting or running) is gone: restart it later, or fail.

    `d` is not reloaded: the compare-and-set is against the status seen with the dead pid.
    """
    attempt = next_attempt(d)
    if attempt is None:
        if d.auto_restart and d.restart_count:
            reason = f"{reason} (gave up after {d.restart_count} automatic restarts)"
        return fail(d, reason, found)
    delay_s = backoff_s(attempt)
    limit = settings.SHARDBOARD_RESTART_MAX_ATTEMPTS
    with transaction.atomic():
        moved = d.transition(
            Status.RESTARTING,
            reason=f"{reason} Restart {attempt} of {limit} in {delay_s:g} s.",
            failure_reason=reason,
            diagnosis=diagnosis_detail(found),
            restart_count=attempt,
            restart_at=timezone.now() + timedelta(seconds=delay_s),
        )
        if moved:
            transaction.on_commit(lambda: enqueue_restart(d, attempt, delay_s))
    if moved:
        detach_simulated(d)
        events.publish(d)
    return moved


def enqueue_restart(d: Deployment, attempt: int, delay_s: float) -> None:
    from deployments.host import tasks

    tasks.restart.apply_async(
        args=[d.pk, attempt], countdown=max(0.0, delay_s), queue=host_queue(d.host.name)
    )


def resume_restart(d: Deployment) -> None:
    """After a worker restart: the countdown task died with the old worker; send it again."""
    due_s = (d.restart_at - timezone.now()).total_seconds() if d.restart_at else 0.0
    enqueue_restart(d, d.restart_count, due_s)
    log.info("deployment %s: restart %d re-sent, due in %.1f s", d.pk, d.restart_count, due_s)

"""The automatic restart of an engine that died after it ran: when, how often, and the task.

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

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from deployments.host import diagnosis
from deployments.host.transitions import detach_simulated, diagnosis_detail, fail
from deployments.live import pushes
from deployments.models import Deployment, Status

log = logging.getLogger(__name__)
STABLE_RUN_S = 600.0  # running this long since the last (re)start: the count starts over


def backoff_s(attempt: int) -> float:
    """5 s, 10 s, 20 s ... for attempts 1, 2, 3 ..., never more than the cap."""
    base = float(settings.SHARDBOARD_RESTART_BACKOFF_S)
    cap = float(settings.SHARDBOARD_RESTART_BACKOFF_MAX_S)
    return min(cap, base * 2.0 ** min(max(attempt, 1) - 1, 30))


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
            pushes.publish_on_commit(d)
    if moved:
        detach_simulated(d)
    return moved


def enqueue_restart(d: Deployment, attempt: int, delay_s: float) -> None:
    # By name: the task module imports engine_control, which imports this one.
    celery_app.send_task(
        "deployments.restart",
        args=[d.pk, attempt],
        countdown=max(0.0, delay_s),
        queue=host_queue(d.host.name),
    )


def resume_restart(d: Deployment) -> None:
    """After a worker restart: the countdown task died with the old worker; send it again."""
    due_s = (d.restart_at - timezone.now()).total_seconds() if d.restart_at else 0.0
    enqueue_restart(d, d.restart_count, due_s)
    log.info("deployment %s: restart %d re-sent, due in %.1f s", d.pk, d.restart_count, due_s)

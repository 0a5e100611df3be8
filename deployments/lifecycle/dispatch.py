"""Sending the host worker's tasks from the web, after commit, without failing the request.

The row is committed before the send; a broker that is down must not turn that into a 500
nor lose the work: the host worker's sweeper (``deployments.host.sweeper``) reads pending and
stopping rows from the database and does them itself, so a failed send only delays them.
"""

from __future__ import annotations

import logging

from django.conf import settings

from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from deployments.live import pushes
from deployments.models import Deployment

log = logging.getLogger(__name__)

# A send to a Redis that is down gives up after about a second (not Celery's default of
# retrying publish for longer, nor the worker's reconnect-forever setting): the row is already
# committed and the host worker's sweeper takes it up from the database.
SEND_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.3}
QUEUE_DOWN_NOTE = (
    "The task queue (Redis) did not answer, so the host worker was not told at once; it "
    "picks the work up from the database within {seconds:g} s (sooner once Redis is back)."
)


def enqueue(task_name: str, deployment: Deployment, rows: list[Deployment]) -> None:
    """Send the task (by name: the web side never imports the host worker's code). A failed
    send is noted on ``rows`` (the caller's objects) instead of raising after the commit."""
    if not send(task_name, [deployment.pk], deployment.host.name):
        note = QUEUE_DOWN_NOTE.format(seconds=settings.SHARDBOARD_SWEEP_AFTER_S)
        for row in rows:
            setattr(row, "queue_note", note)  # noqa: B010 - not a model field
    pushes.publish(deployment)


def send(task_name: str, args: list[int], host_name: str) -> bool:
    """Send one task to a host's queue; False (logged) when the broker did not take it: the
    host worker's sweeper does the work from the database instead."""
    try:
        celery_app.send_task(
            task_name,
            args=args,
            queue=host_queue(host_name),
            retry=True,
            retry_policy=SEND_RETRY_POLICY,
        )
    except Exception as exc:  # kombu raises several kinds; the row is committed either way
        log.warning("could not send %s %s to %s: %s", task_name, args, host_name, exc)
        return False
    return True


def queue_note(deployment: Deployment) -> str:
    """What the user should know about the sending of the task just done ('' when sent)."""
    return str(getattr(deployment, "queue_note", ""))

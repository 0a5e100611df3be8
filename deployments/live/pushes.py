"""Pushes of deployment state to browsers. Delivery only: the state itself is in the database."""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from deployments.live import enginelog
from deployments.models import Deployment, replicas

log = logging.getLogger(__name__)

GROUP = "deployments"


def status_payload(deployment: Deployment) -> dict[str, Any]:
    """The row's status; for a replica, also the state of its deployment as a whole (read in
    the caller's transaction, so with this row's change)."""
    payload: dict[str, Any] = {
        "type": "deployment.status",
        "id": deployment.pk,
        "name": deployment.name,
        "status": deployment.status,
        "status_label": deployment.get_status_display(),
        "failure_reason": deployment.failure_reason[:500],
    }
    statuses = list(deployment.group().values_list("status", flat=True))
    if len(statuses) > 1:
        state = replicas.overall(statuses)
        payload |= {
            "group": deployment.group_id,
            "group_status": state.status,
            "group_label": state.label,
            "group_summary": state.summary,
        }
    return payload


def publish(deployment: Deployment) -> None:
    """Push now: for state already committed."""
    _send(deployment.pk, status_payload(deployment))


def _send(pk: int, payload: dict[str, Any]) -> None:
    """Best effort: a Redis outage must not fail the state change that was already committed."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(GROUP, {"type": "deployment.status", "payload": payload})
    except Exception as exc:
        log.warning("could not push the status of deployment %s: %s", pk, exc)


def publish_on_commit(deployment: Deployment) -> None:
    """Push once the transaction that changed the row commits (at once outside one)."""
    payload = status_payload(deployment)
    transaction.on_commit(lambda: _send(deployment.pk, payload))


PROGRESS_STREAM = "shardboard:progress"
PROGRESS_STREAM_MAX = 2000


def progress_key(kind: str, pk: int) -> str:
    """The Redis stream of one deployment's (kind "deployment") or download's progress."""
    return f"{PROGRESS_STREAM}:{kind}:{pk}"


def publish_progress(payload: dict[str, Any], *, stream: str | None = None) -> None:
    """A launch step or download moved: to the browsers now (the rows hold the state), and to
    a short stream so the order of what was pushed can be read back. Best effort."""
    layer = get_channel_layer()
    try:
        if stream:
            client = enginelog.client()  # the Redis the web and the host workers share
            client.xadd(
                stream,
                {"p": json.dumps(payload)},
                maxlen=PROGRESS_STREAM_MAX,
                approximate=True,
            )
            client.expire(stream, 24 * 3600)
        if layer is not None:
            message = {"type": "deployment.progress", "payload": payload}
            async_to_sync(layer.group_send)(GROUP, message)
    except Exception as exc:
        log.warning("could not push progress %s: %s", payload.get("phase"), exc)


def reset_progress(stream: str) -> None:
    """A new download or launch under an id an earlier database may have used: start empty."""
    try:
        enginelog.client().delete(stream)
    except Exception as exc:
        log.warning("could not reset %s: %s", stream, exc)

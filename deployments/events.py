"""Pushes of deployment state to browsers. Delivery only: the state itself is in the database."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from deployments.models import Deployment

log = logging.getLogger(__name__)

GROUP = "deployments"


def status_payload(deployment: Deployment) -> dict[str, Any]:
    return {
        "type": "deployment.status",
        "id": deployment.pk,
        "name": deployment.name,
        "status": deployment.status,
        "status_label": deployment.get_status_display(),
        "failure_reason": deployment.failure_reason[:500],
    }


def publish(deployment: Deployment) -> None:
    """Best effort: a Redis outage must not fail the state change that was already committed."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            GROUP, {"type": "deployment.status", "payload": status_payload(deployment)}
        )
    except Exception as exc:
        log.warning("could not push the status of deployment %s: %s", deployment.pk, exc)

"""Pushes of an engine's preparation to the pages (dashboard, launch form). Delivery only: the
state is the `EnginePrep` row, which the host worker writes and the pages render on load."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from deployments.models import EnginePrep, PrepState

log = logging.getLogger(__name__)

GROUP = "engines"


def payload(row: EnginePrep, host_name: str) -> dict[str, Any]:
    """What a page shows of one engine on one host (the template renders the same fields)."""
    return {
        "type": "engine.prep",
        "host": host_name,
        "engine": row.engine,
        "engine_label": row.get_engine_display(),
        "state": row.state,
        "state_label": PrepState(row.state).label,
        "phase": row.phase,
        "done": row.done,
        "total": row.total,
        "unit": row.unit,
        "percent": row.percent,
        "progress_text": row.progress_text,
        "started_at": row.started_at.isoformat() if row.started_at else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "log_tail": row.log_tail,
        "error": row.error,
        "note": row.note,
    }


def publish_on_commit(row: EnginePrep, host_name: str) -> None:
    """Push once the row's change commits (at once outside a transaction). Best effort: a
    Redis outage must not fail the preparation; the page shows the row on its next load."""
    message = {"type": "engine.prep", "payload": payload(row, host_name)}

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(GROUP, message)
        except Exception as exc:
            log.warning("could not push %s's preparation on %s: %s", row.engine, host_name, exc)

    transaction.on_commit(send)

"""Pushes of a run's progress to its page. Delivery only: the state is in the run's row."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from benchmarks.models import BenchmarkRun

log = logging.getLogger(__name__)


def group(run_id: int) -> str:
    return f"benchmark.{run_id}"


def run_payload(run: BenchmarkRun) -> dict[str, Any]:
    return {
        "type": "benchmark.progress",
        "id": run.pk,
        "status": run.status,
        "status_label": run.get_status_display(),
        "progress": run.progress,
        "levels_done": len(run.levels),
        "error": run.error[:500],
    }


def publish(run: BenchmarkRun) -> None:
    """Best effort: a Redis outage must not stop the run."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        message = {"type": "benchmark.progress", "payload": run_payload(run)}
        async_to_sync(layer.group_send)(group(run.pk), message)
    except Exception as exc:
        log.warning("could not push the progress of benchmark %s: %s", run.pk, exc)

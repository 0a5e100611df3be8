"""The quota check for running deployments, in every host worker: a task, and a loop that
sends nothing over the broker (each worker runs it; teams.host.enforcement is safe to run twice)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from teams.host.enforcement import enforce_monthly

log = logging.getLogger(__name__)
_stop = threading.Event()


@shared_task(name="teams.enforce_quotas")
def enforce_quotas() -> dict[str, Any]:
    return enforce_monthly(timezone.now())


def _loop(interval_s: float) -> None:
    while not _stop.wait(interval_s):
        try:
            result = enforce_monthly(timezone.now())
            if result["flagged"] or result["stopped"]:
                log.info("monthly quota: %s", result)
        except Exception:  # a database outage: try again next pass
            log.exception("quota check failed")
        finally:
            close_old_connections()


@worker_ready.connect
def _on_ready(**_: Any) -> None:
    interval_s = settings.SHARDBOARD_QUOTA_CHECK_S
    if interval_s > 0:
        threading.Thread(target=_loop, args=(interval_s,), name="quota", daemon=True).start()


@worker_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    _stop.set()

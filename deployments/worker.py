"""Engine watchdog and reconcile, run inside the host worker process (see `hostworker`).

On start, reconcile: a live engine whose row is active is adopted, an active row whose engine
is gone is failed (leases freed), a pending automatic restart is sent again, and a marked
engine with no active row is stopped. Then a thread checks the engines of this host every
second; one that died is failed, or restarted later when its deployment has auto-restart on.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections

from deployments import diagnosis, outcomes, runner
from deployments import supervisor as sv
from deployments.models import ACTIVE, Deployment, Status

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 1.0
_stop = threading.Event()


def _ours() -> Any:
    return Deployment.objects.filter(
        host__name=settings.SHARDBOARD_HOST_NAME, status__in=list(ACTIVE)
    )


def _alive(d: Deployment) -> bool:
    return bool(d.pid) and sv.is_alive(d.pid, d.process_started_at)


def _engine_died(d: Deployment) -> None:
    text = sv.tail(Path(d.log_path)) if d.log_path else ""
    found = diagnosis.diagnose_exit(text, None, None)
    if d.pgid:
        sv.stop(d.pgid, 5)  # children left behind by a dead API server
    sv.reap_children()
    outcomes.engine_lost(
        d, f"The engine process exited unexpectedly. {found.title}: {found.reason}", found
    )


def check_once() -> None:
    for d in _ours().filter(status__in=[Status.STARTING, Status.RUNNING]).exclude(pid=None):
        if not _alive(d):
            _engine_died(d)


def reconcile() -> dict[str, int]:
    found = {e.deployment_id: e for e in sv.find_engines()}
    counts = {"adopted": 0, "failed": 0, "orphans_stopped": 0, "restarts_resent": 0}
    for d in _ours():
        if d.pid and str(d.pk) in found and _alive(d):
            counts["adopted"] += 1
            if d.status == Status.STOPPING:
                runner.stop(d.pk)
            continue
        if d.status == Status.PENDING:
            continue  # its launch task is still queued
        if d.status == Status.RESTARTING:
            if str(d.pk) in found:  # spawned by a restart the old worker did not record
                sv.stop(found.pop(str(d.pk)).pgid, settings.SHARDBOARD_STOP_GRACE_S)
            outcomes.resume_restart(d)
            counts["restarts_resent"] += 1
            continue
        if d.status == Status.STOPPING:
            runner.stop(d.pk)
            continue
        if (
            not outcomes.engine_lost(
                d, "The engine was not running when the host worker started again."
            )
            or d.status == Status.FAILED
        ):
            counts["failed"] += 1
    active_ids = {
        str(pk)
        for pk in Deployment.objects.filter(status__in=list(ACTIVE)).values_list("pk", flat=True)
    }
    for deployment_id, engine in found.items():
        if deployment_id not in active_ids:
            log.warning(
                "stopping orphan engine of deployment %s (pgid %s)", deployment_id, engine.pgid
            )
            sv.stop(engine.pgid, settings.SHARDBOARD_STOP_GRACE_S)
            counts["orphans_stopped"] += 1
    return counts


def _watch_loop() -> None:
    while not _stop.wait(WATCH_INTERVAL_S):
        try:
            check_once()
        except Exception:  # the watchdog must outlive a database hiccup; it logs and retries
            log.exception("engine watchdog pass failed")
        finally:
            close_old_connections()


@worker_ready.connect
def _on_ready(**kwargs: Any) -> None:
    try:
        log.info("reconciled engines: %s", reconcile())
    except Exception:
        log.exception("reconcile failed; the watchdog still starts")
    threading.Thread(target=_watch_loop, name="engine-watchdog", daemon=True).start()


@worker_shutdown.connect
def _on_shutdown(**kwargs: Any) -> None:
    _stop.set()

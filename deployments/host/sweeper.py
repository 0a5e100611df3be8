"""The host worker's own pass over its work, so no deployment waits on a lost message.

A Celery message can be lost or held: Redis down when the web sent it (the row committed,
the send failed), or a worker killed while it held an ``acks_late`` message (redelivered only
after the 4 h visibility timeout). The database row is the durable record, so every
SHARDBOARD_SWEEP_INTERVAL_S the host worker reads its own rows and does, itself, what no
thread of it is doing once it is older than SHARDBOARD_SWEEP_AFTER_S: a `pending` launch, a
`stopping` stop, a `starting` engine whose readiness nobody probes (a task killed by a
database error, an engine adopted after a restart) and a `restarting` one past its time.
A Celery message arriving later finds the status changed, or the work in hand, and does
nothing: every move is a compare-and-set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from deployments.host import adapters, engine_control
from deployments.models import AdapterReplica, AdapterStatus, Deployment, Status

log = logging.getLogger(__name__)
# What a thread of this worker has in hand: ("start", pk) for a launch, restart or resumed
# readiness probe, ("stop", pk) for a stop, which must never wait on a start in hand.
Key = tuple[str, int]
_held: set[Key] = set()
_lock = threading.Lock()
_stop = threading.Event()


@contextmanager
def claimed(pk: Key) -> Iterator[bool]:
    """True, and the deployment held by this thread, unless another thread holds it."""
    with _lock:
        if pk in _held:
            got = False
        else:
            _held.add(pk)
            got = True
    try:
        yield got
    finally:
        if got:
            with _lock:
                _held.discard(pk)


def in_hand(pk: Key) -> bool:
    with _lock:
        return pk in _held


def run_claimed(pk: Key, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    with claimed(pk) as got:
        if not got:
            return {"skipped": "already in hand in this worker"}
        try:
            return work()
        finally:
            close_old_connections()


def dispatch(pk: Key, work: Callable[[], dict[str, Any]], what: str) -> bool:
    """Run ``work`` on a thread of its own unless the deployment is already in hand."""
    if in_hand(pk):
        return False

    def body() -> None:
        try:
            log.info("deployment %s: %s", pk, what)
            run_claimed(pk, work)
        except Exception:
            log.exception("deployment %s: %s failed", pk, what)

    threading.Thread(target=body, name=f"sweep-{pk[0]}-{pk[1]}", daemon=True).start()
    return True


Work = tuple[Key, Callable[[], dict[str, Any]], str]


def _work_for(d: Deployment) -> Work | None:
    pk = d.pk
    if d.status == Status.PENDING:
        return ("start", pk), lambda: engine_control.launch(pk), "launch taken up by the sweeper"
    if d.status == Status.STOPPING:
        return ("stop", pk), lambda: engine_control.stop(pk), "stop taken up by the sweeper"
    if d.status == Status.STARTING and d.pid:
        return ("start", pk), lambda: engine_control.resume_starting(pk), "readiness resumed"
    if d.status == Status.RESTARTING:
        attempt = d.restart_count
        return ("start", pk), lambda: engine_control.restart(pk, attempt), "restart resent"
    return None


def sweep_once() -> int:
    cutoff = timezone.now() - timedelta(seconds=settings.SHARDBOARD_SWEEP_AFTER_S)
    rows = Deployment.objects.filter(
        host__name=settings.SHARDBOARD_HOST_NAME,
        status__in=[Status.PENDING, Status.STOPPING, Status.STARTING, Status.RESTARTING],
        updated_at__lt=cutoff,
    )
    started = 0
    for d in rows:
        if d.status == Status.RESTARTING and (d.restart_at is None or d.restart_at > cutoff):
            continue  # its countdown task is still due
        found = _work_for(d)
        if found is not None and dispatch(*found):
            started += 1
    return started + _sweep_adapters(cutoff)


def _sweep_adapters(cutoff: Any) -> int:
    """Adapter loads and unloads whose message was lost, on this host's running replicas."""
    rows = AdapterReplica.objects.filter(
        replica__host__name=settings.SHARDBOARD_HOST_NAME,
        replica__status=Status.RUNNING,
        status=AdapterStatus.LOADING,
        updated_at__lt=cutoff,
    ).values_list("pk", flat=True)
    going = AdapterReplica.objects.filter(
        replica__host__name=settings.SHARDBOARD_HOST_NAME,
        status=AdapterStatus.LOADED,
        adapter__status=AdapterStatus.UNLOADING,
        updated_at__lt=cutoff,
    ).values_list("pk", flat=True)
    started = 0
    for pk in rows:
        started += dispatch(("adapter", pk), partial(adapters.load, pk), "adapter load resent")
    for pk in going:
        started += dispatch(("adapter", pk), partial(adapters.unload, pk), "adapter unload resent")
    return started


def _loop() -> None:
    while not _stop.wait(settings.SHARDBOARD_SWEEP_INTERVAL_S):
        try:
            sweep_once()
        except Exception:  # a database outage: try again next pass
            log.exception("sweep failed")
        finally:
            close_old_connections()


def start() -> None:
    threading.Thread(target=_loop, name="sweeper", daemon=True).start()


def stop() -> None:
    _stop.set()

"""Engine watchdog and reconcile, run inside the host worker process (see `hostworker`).

On start, reconcile: a live engine whose row is active is adopted, an active row whose engine
is gone is failed (leases freed), an adopted `starting` engine is probed for readiness again,
a pending automatic restart is sent again, and a marked engine with no active row is stopped.
Then a thread checks the engines of this host every second; one that died, or a running one
that stopped answering its health check (`host.health`), is failed, or restarted later when
its deployment has auto-restart on. The sweeper (`host.sweeper`) takes up work whose Celery
message was lost.

Only engines whose owner marker is this worker's (`engine_owner()`: host name and
installation) are adopted, failed over or stopped; another installation's engines on this
machine are left alone. An engine without an owner marker (spawned before the marker
existed) is adopted only when its row names its pid and start time, and never stopped as an
orphan. The watchdog names the real exit code or signal of an engine this worker spawned;
only an adopted engine's exit status is unknown (it went to init, not to us).
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from pathlib import Path
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections

from deployments.host import (
    diagnosis,
    engine_control,
    health,
    launchphases,
    logship,
    restart_policy,
    sweeper,
    transitions,
)
from deployments.host import supervisor as sv
from deployments.host.owner import engine_owner
from deployments.host.ray import commands as ray_commands
from deployments.host.watchdog import raynodes as ray_watch
from deployments.models import ACTIVE, Deployment, Status

ENGINE_HOLDS_GPUS = (Status.STARTING, Status.RUNNING, Status.STOPPING)
log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 1.0
_stop = threading.Event()


def _ours() -> Any:
    return Deployment.objects.filter(
        host__name=settings.SHARDBOARD_HOST_NAME, status__in=list(ACTIVE)
    )


def _alive(d: Deployment) -> bool:
    return sv.is_alive(d.pid, d.process_started_at) if d.pid else False


def _engine_died(d: Deployment) -> None:
    text = logship.finish(d, _log_path(d))
    exit_info = sv.child_exit(d.pid) if d.pid else None  # None: adopted, not our child
    code, sig = (exit_info.exit_code, exit_info.signal) if exit_info else (None, None)
    found = diagnosis.diagnose_exit(text, code, sig)
    if d.pgid:  # children left behind by a dead API server
        sv.stop(d.pgid, 5, owner=engine_owner(), deployment_id=str(d.pk))
    sv.reap_children()
    how = diagnosis.exit_text(code, sig)
    said = "" if how in found.reason else f" ({how})"
    reason = f"The engine process exited unexpectedly{said}. {found.title}: {found.reason}"
    if d.status == Status.SLEEPING:
        # Its freed bytes may be leased to others by now: a restart would start an engine on
        # memory it no longer holds, so it fails (leases released) and is launched again.
        transitions.fail(d, f"{reason} It died asleep; launch it again.", found)
    else:
        restart_policy.engine_lost(d, reason, found)
    if d.pid:
        sv.forget_child(d.pid)


def _log_path(d: Deployment) -> Path | None:
    return Path(d.log_path) if d.log_path else None


def check_once() -> None:
    ray_watch.check()  # before the engines: a lost node, not the engine it broke, is the reason
    # a sleeping engine's process is alive too: one that dies asleep is lost like any other
    watched = [Status.STARTING, Status.RUNNING, Status.SLEEPING]
    for d in _ours().filter(status__in=watched).exclude(pid=None):
        if not _alive(d):
            health.forget(d.pk)
            _engine_died(d)
        elif d.status == Status.RUNNING:
            health.check(d)  # a live pid may be a hung engine


def _adoptable(d: Deployment, engine: sv.FoundEngine | None, owner: str) -> bool:
    """The live engine of `d`; one without an owner marker must match the row's pid exactly."""
    if engine is None or not _alive(d):
        return False
    return engine.owner == owner or (engine.owner is None and d.pid in engine.pids)


def reconcile() -> dict[str, int]:
    owner = engine_owner()
    found = {e.deployment_id: e for e in sv.find_engines(owner)}
    nodes = {k: found.pop(k) for k in list(found) if ray_commands.deployment_of(k) is not None}
    counts = {"adopted": 0, "failed": 0, "orphans_stopped": 0, "restarts_resent": 0}
    counts.update(ray_watch.reconcile(nodes, owner))
    grace_s = settings.SHARDBOARD_STOP_GRACE_S
    for d in _ours():
        if d.pid and _adoptable(d, found.get(str(d.pk)), owner):
            found.pop(str(d.pk))
            counts["adopted"] += 1
            steps = launchphases.resume_for(d) if d.status == Status.STARTING else None
            if (path := _log_path(d)) is not None:
                logship.follow(d, path, resume=True, on_lines=steps.feed if steps else None)
            if d.status == Status.STOPPING:
                engine_control.stop(d.pk)
            elif d.status == Status.STARTING:  # nobody waits on its readiness any more
                sweeper.dispatch(
                    ("start", d.pk),
                    partial(engine_control.resume_starting, d.pk),
                    "readiness probing resumed after the worker restarted",
                )
            continue
        if d.status == Status.PENDING:
            continue  # its launch task is still queued
        if d.status == Status.RESTARTING:
            engine = found.get(str(d.pk))
            if engine is not None and engine.owner == owner:  # spawned by an unrecorded restart
                sv.stop(found.pop(str(d.pk)).pgid, grace_s, owner=owner, deployment_id=str(d.pk))
            restart_policy.resume_restart(d)
            counts["restarts_resent"] += 1
            continue
        if d.status == Status.STOPPING:
            engine_control.stop(d.pk)
            continue
        logship.finish(d, _log_path(d))
        if (
            not restart_policy.engine_lost(
                d, "The engine was not running when the host worker started again."
            )
            or d.status == Status.FAILED
        ):
            counts["failed"] += 1
    counts["orphans_stopped"] = _stop_orphans(found, owner)
    return counts


def _stop_orphans(found: dict[str, sv.FoundEngine], owner: str) -> int:
    """Stop engines of this worker (owner marker) that no active row of this host claims."""
    active_ids = {str(pk) for pk in _ours().values_list("pk", flat=True)}
    stopped = 0
    for deployment_id, engine in found.items():
        if engine.owner != owner:
            continue  # no owner marker: maybe another installation's; never ours to stop
        if deployment_id not in active_ids:
            log.warning(
                "stopping orphan engine of deployment %s (pgid %s)", deployment_id, engine.pgid
            )
            sv.stop(
                engine.pgid,
                settings.SHARDBOARD_STOP_GRACE_S,
                owner=owner,
                deployment_id=deployment_id,
            )
            stopped += 1
    return stopped


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
    sweeper.start()


@worker_shutdown.connect
def _on_shutdown(**kwargs: Any) -> None:
    _stop.set()
    sweeper.stop()
    if settings.SHARDBOARD_STOP_ENGINES_ON_EXIT:
        log.info("stopped %d engine(s) on exit", stop_all_engines())
        log.info("stopped %d Ray node(s) on exit", ray_watch.stop_all_nodes())
    logship.stop_all()


def stop_all_engines() -> int:
    """Stop every active deployment of this host through the ordinary stop (stopping, SIGTERM
    then SIGKILL, leases freed, stopped). For the embedded default, where Ctrl-C is meant to
    end everything; a GPU host's worker leaves its engines serving and adopts them again."""
    stopped = 0
    for d in _ours().select_related("host"):
        reason = "the host worker was stopped (SHARDBOARD_STOP_ENGINES_ON_EXIT)"
        if d.status != Status.STOPPING and not transitions.move(d, Status.STOPPING, reason):
            continue
        engine_control.stop(d.pk)
        stopped += 1
    return stopped


def active_engine_pgids(host: str) -> dict[int, str]:
    """pgid -> deployment name for the engines that may hold GPU memory on ``host``; the
    sampler attributes memory with it (settings.SHARDBOARD_ENGINE_PGIDS)."""
    rows = Deployment.objects.filter(
        host__name=host, status__in=ENGINE_HOLDS_GPUS, pgid__isnull=False
    ).values_list("pgid", "name")
    return {pgid: str(name) for pgid, name in rows if pgid is not None}

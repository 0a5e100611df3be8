"""Idle deployments on this host: asleep (vLLM) or scaled to zero (the others), and awake again.

Runs in the host worker that owns the engines, since putting one to sleep or stopping it is
this worker's business. Every SHARDBOARD_IDLE_CHECK_S a thread looks at this host's running
rows that have an idle setting (`sleep_after_s`): the last request through the gateway
(deployments.live.idle, in Redis) or, with none since, the last wake or start. Past the
setting:

- a vLLM engine launched with sleep mode is drained, asked to sleep (level 1 when host RAM
  holds its weights, else 2: engines.sleep.choose_level) and moved to `sleeping`; its leases
  then count only what it still holds (host.sleepleases);
- any other engine (transformers serve, llama-server, vLLM on the CPU: no sleep mode there,
  engines.platforms; or a vLLM engine started before it had a setting) is stopped and moved to
  `scaled_to_zero`, the audit row saying why it could not sleep: leases released, plan and
  name kept, so the next request starts it again through the ordinary launch.

Before either, the replica is marked going idle and drained; a request that arrives then is
held by the gateway, which calls the sleep off (the replica is back in rotation, an audit row
`deployment.sleep_called_off`) or, if the sleep or stop is already under way, waits for it and
wakes or starts the replica again (deployments.live.idle: the marks; gateway.wake: the hold).

Each is an audit row with its reason. A wake (task `deployments.wake`, sent by the gateway's
first held request) takes the leases back whole or waits for them, bounded by
SHARDBOARD_WAKE_HOLD_S, saying so; then asks the engine to wake.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

import psutil
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from controlpanel.audit import audit_record
from deployments.engines import platforms
from deployments.engines import sleep as sleep_mode
from deployments.host import adapters, engine_control, engine_sleep, sleepleases, transitions
from deployments.host.sweeper import run_claimed
from deployments.live import drain
from deployments.live import idle as idle_marks
from deployments.models import Deployment, Engine, Status

log = logging.getLogger(__name__)
_stop = threading.Event()
_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()
WAKE_RETRY_S = 1.0
GOING_MARGIN_S = 60.0  # the going-idle mark outlives a drain and a stop by this much


def check_once(now: datetime | None = None) -> list[dict[str, Any]]:
    """Put every idle deployment of this host to sleep or scale it to zero."""
    now = now or timezone.now()
    done = []
    rows = Deployment.objects.filter(
        host__name=settings.SHARDBOARD_HOST_NAME,
        status=Status.RUNNING,
        sleep_after_s__isnull=False,
        retired=False,
    ).select_related("host")
    for d in rows:
        idle_s = _idle_s(d, now)
        if idle_s is not None and d.sleep_after_s is not None and idle_s >= d.sleep_after_s:
            done.append(go_idle(d.pk, idle_s))
    return done


def _idle_s(d: Deployment, now: datetime) -> float | None:
    """Seconds since the last request, or since it last woke or started (the row's last
    change); None: unknown."""
    try:
        last_s = idle_marks.last_request_s(d.name)
    except (RedisError, OSError):
        return None  # without the gateway's figures nothing is known to be idle
    since = [d.woke_at, d.updated_at]
    latest_s = max([t.timestamp() for t in since if t is not None] + [last_s or 0.0])
    return now.timestamp() - latest_s


def go_idle(deployment_id: int, idle_s: float) -> dict[str, Any]:
    return run_claimed(("stop", deployment_id), lambda: _go_idle(deployment_id, idle_s))


def _go_idle(deployment_id: int, idle_s: float) -> dict[str, Any]:
    """Marked going idle, drained, then asleep or scaled to zero, unless a request came
    meanwhile: then the sleep is called off and the replica is back in rotation (the gateway
    held the request: playground.gateway.wake.after_drain)."""
    d = Deployment.objects.select_related("host").get(pk=deployment_id)
    if d.status != Status.RUNNING or d.sleep_after_s is None:
        return {"skipped": f"status is {d.status}"}
    why = f"no request for {idle_s / 60:.1f} min (sleep after {d.sleep_after_s / 60:g} min)"
    decided_s = time.time()
    mark_s = drain.grace_s() + settings.SHARDBOARD_STOP_GRACE_S + GOING_MARGIN_S
    idle_marks.going_begin(d.pk, mark_s)
    try:
        drained = drain.drain_replica(d.pk)  # its streams end before the engine sleeps or stops
        if not idle_marks.going_commit(d.pk, d.name, decided_s, mark_s):
            return _called_off(d, why)
        if d.engine == Engine.VLLM and sleep_mode.SLEEP_FLAG in d.argv:
            return _sleep(d, why, drained)
        return _scale_to_zero(d, why)
    finally:
        idle_marks.going_end(d.pk)


def _called_off(d: Deployment, why: str) -> dict[str, Any]:
    drain.drain_end([d.pk])
    _audit(d, "deployment.sleep_called_off", f"a request arrived as it was going idle ({why})")
    return {"called_off": d.pk}


def _sleep(d: Deployment, why: str, drained: drain.Drained) -> dict[str, Any]:
    """`sleeping` BEFORE the engine is asked to sleep (a sleep at level 1 copies the weights
    to RAM: seconds on a large model), so that a request arriving meanwhile is held by the
    gateway and wakes it, instead of finding a replica out of rotation. The leases shrink only
    once the engine has freed the memory; a wake waits for the sleep to end (the engine's
    lock)."""
    weights = sum(f.weights_bytes for f in sleepleases.figures_by_gpu(d).values())
    choice = sleep_mode.choose_level(
        weights_bytes=weights, ram_available_bytes=psutil.virtual_memory().available
    )
    with _engine_lock(d.pk):
        reason = f"asleep: {why}; {choice.why}; {drained.describe()}"
        if not transitions.move(
            d, Status.SLEEPING, reason, slept_at=timezone.now(), sleep_level=choice.level
        ):
            drain.drain_end([d.pk])
            return {"skipped": "moved on meanwhile"}
        started = time.monotonic()
        try:
            engine_sleep.put_to_sleep(d.base_url, choice.level)
        except engine_sleep.EngineSleepError as exc:
            transitions.move(d, Status.RUNNING, f"did not go to sleep: {exc}", sleep_level=None)
            drain.drain_end([d.pk])
            return {"not_slept": str(exc)}
        took_s = time.monotonic() - started
        with transaction.atomic():
            kept = sleepleases.lease_asleep(d)
            _audit(
                d,
                "deployment.sleep",
                why,
                level=choice.level,
                level_why=choice.why,
                sleep_s=round(took_s, 3),
                kept_bytes_per_gpu=kept,
            )
    return {"slept": d.pk, "level": choice.level}


def _engine_lock(deployment_id: int) -> threading.Lock:
    """One sleep or wake of an engine at a time, in this worker (the one that owns it)."""
    with _locks_guard:
        return _locks.setdefault(deployment_id, threading.Lock())


def _scale_to_zero(d: Deployment, why: str) -> dict[str, Any]:
    cannot = platforms.no_sleep_reason(d.engine, d.engine_device) or (
        "it was started without sleep mode"
    )
    if not transitions.move(d, Status.STOPPING, f"idle: {why}; scaling to zero ({cannot})"):
        drain.drain_end([d.pk])
        return {"skipped": "moved on meanwhile"}
    stopped = engine_control.stop_engine(d)
    drain.drain_end([d.pk])  # the next start, under the same id, must be in rotation at once
    with transaction.atomic():
        transitions.move(
            d,
            Status.SCALED_TO_ZERO,
            f"scaled to zero: {stopped}",
            release_leases=True,
            slept_at=timezone.now(),
            pid=None,
            pgid=None,
            process_started_at=None,
        )
        _audit(d, "deployment.scale_to_zero", why, cannot_sleep=cannot)
    return {"scaled_to_zero": d.pk}


def wake(deployment_id: int, reason: str) -> dict[str, Any]:
    return run_claimed(("start", deployment_id), lambda: _wake(deployment_id, reason))


def _wake(deployment_id: int, reason: str) -> dict[str, Any]:
    with _engine_lock(deployment_id):  # a sleep under way ends first
        return _wake_now(deployment_id, reason)


def _wake_now(deployment_id: int, reason: str) -> dict[str, Any]:
    d = Deployment.objects.select_related("host").get(pk=deployment_id)
    if d.status != Status.SLEEPING:
        idle_marks.wake_done(d.name)  # awake already, or not asleep yet: the next request asks
        return {"skipped": f"status is {d.status}"}
    started = time.monotonic()
    if (blocked := _take_leases(d, started)) is not None:
        idle_marks.wake_done(d.name)  # the next request tries again
        return {"blocked": blocked}
    level = d.sleep_level or 1
    try:
        engine_sleep.wake_up(d.base_url, level)
    except engine_sleep.EngineSleepError as exc:
        transitions.fail(d, f"The engine did not wake: {exc}")
        idle_marks.wake_done(d.name)
        return {"failed": str(exc)}
    # level 2 dropped the weights, the adapter slots among them: loaded again in place (and
    # those asked for while it slept) before it takes requests
    adapters.before_rotation(d, d.base_url)
    took_s = time.monotonic() - started
    with transaction.atomic():
        now = timezone.now()
        transitions.move(
            d, Status.RUNNING, f"awake in {took_s:.1f} s: {reason}", woke_at=now, sleep_level=None
        )
        _audit(d, "deployment.wake", reason, level=level, wake_s=round(took_s, 3))
    drain.drain_end([d.pk])
    idle_marks.record_request(d.name)  # the request that woke it counts as one
    idle_marks.wake_done(d.name)
    return {"woke": d.pk, "wake_s": took_s}


def _take_leases(d: Deployment, started: float) -> str | None:
    """Take the leases back whole, waiting (bounded) while others hold the bytes; None when
    taken, else why not. The wait is said once, as an audit row, when it begins."""
    said = False
    while True:
        try:
            sleepleases.lease_awake(d)
            return None
        except sleepleases.WakeBlocked as exc:
            if time.monotonic() - started >= settings.SHARDBOARD_WAKE_HOLD_S:
                _audit(d, "deployment.wake_blocked", str(exc))
                return str(exc)
            if not said:
                _audit(d, "deployment.wake_waits", str(exc))
                said = True
        time.sleep(WAKE_RETRY_S)


def _audit(d: Deployment, action: str, reason: str, **detail: Any) -> None:
    audit_record(
        actor=None,
        action=action,
        target_type="deployment",
        target_id=d.group_id,
        detail={
            "name": d.name,
            "replica_id": d.pk,
            "host": d.host.name,
            "reason": reason,
            **detail,
        },
    )


def _check_loop() -> None:
    while not _stop.wait(settings.SHARDBOARD_IDLE_CHECK_S):
        try:
            check_once()
        except Exception:  # the loop must outlive a database hiccup; it logs and retries
            log.exception("idle check failed")
        finally:
            close_old_connections()


@worker_ready.connect
def _on_ready(**kwargs: Any) -> None:
    _stop.clear()
    threading.Thread(target=_check_loop, name="idle-check", daemon=True).start()


@worker_shutdown.connect
def _on_shutdown(**kwargs: Any) -> None:
    _stop.set()

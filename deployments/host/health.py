"""Health of running engines: a live pid is not a serving engine.

The watchdog asks each running engine's /health (both adapters serve it) every
SHARDBOARD_HEALTH_INTERVAL_S with a SHARDBOARD_HEALTH_TIMEOUT_S timeout. After
SHARDBOARD_HEALTH_FAILURES failures in a row the engine is taken as hung: its process group
is killed (SIGKILL reaches a stopped process; SIGTERM would wait for it to continue) and
the deployment is handled like a crash, failed or restarted, with the reason on its timeline.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
from django.conf import settings

from controlpanel import enginehttp
from deployments.host import logship, restart_policy
from deployments.host import supervisor as sv
from deployments.host.owner import engine_owner
from deployments.models import Deployment

log = logging.getLogger(__name__)
HEALTH_PATH = "/health"
_failures: dict[int, int] = {}
_last_probe: dict[int, float] = {}


def probe(d: Deployment) -> str | None:
    """None when the engine answers 200; else what went wrong."""
    try:
        response = enginehttp.client().get(
            f"{d.base_url}{HEALTH_PATH}", timeout=settings.SHARDBOARD_HEALTH_TIMEOUT_S
        )
    except httpx.TimeoutException:
        return f"no answer within {settings.SHARDBOARD_HEALTH_TIMEOUT_S:g} s"
    except httpx.TransportError as exc:
        return f"{type(exc).__name__}"
    return None if response.status_code == 200 else f"answered HTTP {response.status_code}"


def check(d: Deployment) -> bool:
    """Probe ``d`` (running, pid alive) when due; True when it was found hung and handled."""
    now = time.monotonic()
    if now - _last_probe.get(d.pk, 0.0) < settings.SHARDBOARD_HEALTH_INTERVAL_S:
        return False
    _last_probe[d.pk] = now
    problem = probe(d)
    if problem is None:
        _failures.pop(d.pk, None)
        return False
    count = _failures.get(d.pk, 0) + 1
    _failures[d.pk] = count
    log.warning("deployment %s: health check failed (%d in a row): %s", d.pk, count, problem)
    if count < settings.SHARDBOARD_HEALTH_FAILURES:
        return False
    forget(d.pk)
    _hung(d, count, problem)
    return True


def _hung(d: Deployment, count: int, problem: str) -> None:
    if d.pgid:
        # SIGTERM waits while the process is stopped; SIGKILL after the short grace does not.
        sv.stop(d.pgid, 0.5, owner=engine_owner(), deployment_id=str(d.pk))
    sv.reap_children()
    logship.finish(d, Path(d.log_path) if d.log_path else None)
    restart_policy.engine_lost(
        d,
        f"The engine is not answering its health check ({count} failures in a row, "
        f"{settings.SHARDBOARD_HEALTH_INTERVAL_S:g} s apart; last: {problem}): it was taken "
        "as hung and killed.",
    )
    if d.pid:
        sv.forget_child(d.pid)


def forget(pk: int) -> None:
    _failures.pop(pk, None)
    _last_probe.pop(pk, None)

"""Engines that share a GPU start one after the other, in launch order.

vLLM sizes its KV cache from the memory it sees consumed while it profiles, and fails when
another process frees memory meanwhile, so a second engine must not load or profile on a GPU
while the first still does ("start the second only when the first has allocated"). A launch
waits while an earlier deployment that reserves one of its GPUs is still pending or starting;
the wait is bounded by the readiness timeout, after which it starts anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings

from deployments.models import Deployment, Status

log = logging.getLogger(__name__)

POLL_S = 1.0
STARTING_UP = (Status.PENDING, Status.STARTING)


def ahead_on_gpus(d: Deployment) -> list[str]:
    """Names of earlier deployments still starting up on one of the GPUs ``d`` reserves."""
    gpu_ids = list(d.leases.filter(active=True).values_list("gpu_id", flat=True))
    if not gpu_ids:
        return []
    return sorted(
        Deployment.objects.filter(
            pk__lt=d.pk,
            status__in=list(STARTING_UP),
            leases__gpu_id__in=gpu_ids,
            leases__active=True,
        )
        .distinct()
        .values_list("name", flat=True)
    )


def wait_for_turn(d: Deployment, *, sleep: Callable[[float], None] = time.sleep) -> float:
    """Block until no earlier engine is starting on ``d``'s GPUs (simulated GPUs hold no real
    memory: no wait); the seconds waited."""
    if d.host.simulated:
        return 0.0
    started = time.monotonic()
    deadline = started + settings.SHARDBOARD_READY_TIMEOUT_S
    status = d.status
    while time.monotonic() < deadline:
        ahead = ahead_on_gpus(d)
        if not ahead or not Deployment.objects.filter(pk=d.pk, status=status).exists():
            break
        log.info("deployment %s waits for %s to start on a shared GPU", d.pk, ", ".join(ahead))
        sleep(POLL_S)
    return time.monotonic() - started

"""State changes of a deployment on the host worker: each a compare-and-set in a transaction,
its leases released in the same transaction when it ends, and the browsers told after commit."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from deployments.host import diagnosis
from deployments.host.ray import cluster
from deployments.live import pushes
from deployments.models import TERMINAL, Deployment, GpuLease, Status
from monitoring.host.worker import current_backend


def backend() -> Any:
    """The host worker's GPU backend (the simulated one tracks which pid holds memory)."""
    return current_backend()


def detach_simulated(d: Deployment) -> None:
    gpus = backend() if d.host.simulated and d.pid else None
    if gpus is not None and hasattr(gpus, "detach"):
        gpus.detach(d.pid)


def release(d: Deployment) -> None:
    GpuLease.objects.filter(deployment=d, active=True).update(
        active=False, released_at=timezone.now()
    )
    detach_simulated(d)


def diagnosis_detail(found: diagnosis.Diagnosis | None) -> dict[str, Any]:
    if found is None:
        return {}
    return {
        "code": found.code,
        "title": found.title,
        "reason": found.reason,
        "fix": found.fix,
        "matched_line": found.matched_line,
        "suggested_args": [list(a) for a in found.suggested_args],
    }


def fail(d: Deployment, reason: str, found: diagnosis.Diagnosis | None = None) -> bool:
    """Compare-and-set from the status the caller observed (``d`` is not reloaded): an
    observer that saw `starting` cannot turn a `stopping` set since into `failed`."""
    detail = diagnosis_detail(found)
    return move(
        d, Status.FAILED, reason, failure_reason=reason, diagnosis=detail, release_leases=True
    )


def move(
    d: Deployment, new: Status, reason: str, *, release_leases: bool = False, **fields: Any
) -> bool:
    """Compare-and-set ``d`` to ``new``; False when another worker got there first."""
    with transaction.atomic():
        moved = d.transition(new, reason=reason, **fields)
        if moved:
            if release_leases:
                release(d)
            pushes.publish_on_commit(d)
            if new in TERMINAL and d.spans_hosts:
                # every caller has stopped the engine by now: the Ray nodes go next
                transaction.on_commit(partial(cluster.teardown, d.pk))
    return moved

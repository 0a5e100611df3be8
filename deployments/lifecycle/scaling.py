"""Scaling a running deployment: more replicas of the same command, or fewer.

Up: the launch's own path (the engine's placement, lifecycle.placement, on the host's free
devices, pinned to the first replica's layout; the same locked reservation; one
``deployments.launch`` per new row on commit). Every new replica runs the first one's command
and reserves its bytes per device, as at launch. The autoscaler scales through here too.
Down: the highest-index replicas leave the gateway's rotation, are drained and stop (as a stop
does: deployments.live.drain) and are retired: their rows stay, with
their history, but no longer count in the deployment's state (``Deployment.group``).
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.roles import Role
from deployments.handoff.snapshot import GpuSlot
from deployments.lifecycle import placement
from deployments.lifecycle.dispatch import enqueue
from deployments.lifecycle.reservations import reserve_bytes
from deployments.lifecycle.services import (
    DeploymentError,
    ReservationConflict,
    online_host,
    require_role,
)
from deployments.live import drain
from deployments.models import ACTIVE, Deployment, Status
from teams import membership

MAX_REPLICAS = 16
_LIVE = frozenset(ACTIVE) - {Status.STOPPING}


def deployment_scale(
    *,
    user: Any,
    deployment: Deployment,
    replicas: int,
    http_request: HttpRequest | None = None,
) -> Deployment:
    """`replicas` live replicas of `deployment`'s launch; returns the first replica."""
    require_role(user, Role.OPERATOR)
    if not 1 <= replicas <= MAX_REPLICAS:
        raise DeploymentError(f"Replicas: a number from 1 to {MAX_REPLICAS}.")
    with transaction.atomic():
        rows = list(deployment.group().select_for_update().order_by("replica_index"))
        live = [r for r in rows if r.status in _LIVE]
        first = rows[0]
        if problem := membership.act_problem(user, first.team_id, first.name, "scaling"):
            raise DeploymentError(problem)
        if not live or first.status not in _LIVE:
            raise DeploymentError(f"{first.name} is not running; launch it again instead.")
        if first.spans_hosts:
            raise DeploymentError(
                f"{first.name} spans several hosts on a Ray cluster of its own: one replica, "
                "not scaled. Launch another deployment for more."
            )
        if replicas < len(live):
            return _scale_down(user, first, live, replicas, http_request)
    if replicas == len(live):
        raise DeploymentError(f"{first.name} already has {replicas} live replicas.")
    for attempt in range(3):
        try:
            return _scale_up(user, first, replicas, http_request)
        except ReservationConflict:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def _scale_down(
    user: Any,
    first: Deployment,
    live: list[Deployment],
    replicas: int,
    http_request: HttpRequest | None,
) -> Deployment:
    going = sorted(live, key=lambda r: r.replica_index)[replicas:]
    for row in going:
        row.transition(Status.STOPPING, reason=f"scaled down by {user.get_username()}")
        row.retired = True
        row.save(update_fields=["retired"])
    _remember_asked(first, replicas)
    _audit(user, first, len(live), replicas, [r.pk for r in going], http_request)
    # Out of the gateway's rotation at once; the host worker drains them before SIGTERM.
    transaction.on_commit(partial(drain.drain_begin, [r.pk for r in going]))
    for row in going:
        transaction.on_commit(partial(enqueue, "deployments.stop", row, [row]))
    return first


def _scale_up(
    user: Any, first: Deployment, replicas: int, http_request: HttpRequest | None
) -> Deployment:
    host = online_host(first.host.name)
    placer = placement.for_engine(first.engine)
    with transaction.atomic():
        rows = list(first.group().select_for_update().order_by("replica_index"))
        live = [r for r in rows if r.status in _LIVE]
        adding = replicas - len(live)
        if adding <= 0:
            raise DeploymentError(f"{first.name} already has {len(live)} live replicas.")
        slots = placer.more(first, host, adding)
        new_rows = _new_rows(first, slots, rows)
        reserve_bytes(new_rows, host, placement.leases(first.snapshot.with_gpus(slots), host.name))
        for row in new_rows:
            key = row.engine_api_key()
            row.api_key_hash = hashlib.sha256(key.encode()).hexdigest()
            row.save(update_fields=["api_key_hash"])
            row.events.create(
                new_status=Status.PENDING,
                reason=f"scaled up by {user.get_username()} (replica {row.replica_index})",
            )
        _remember_asked(first, replicas)
        _audit(user, first, len(live), replicas, [r.pk for r in new_rows], http_request)
        for row in new_rows:
            transaction.on_commit(partial(enqueue, "deployments.launch", row, [row]))
    return first


def _new_rows(
    first: Deployment, slots: list[list[GpuSlot]], rows: list[Deployment]
) -> list[Deployment]:
    # After every replica this launch ever had, retired ones included: an index names one
    # engine's history.
    ever = Deployment.objects.filter(Q(pk=first.pk) | Q(replica_of=first))
    start = max(ever.aggregate(top=Max("replica_index"))["top"] or 0, len(rows)) + 1
    out = []
    try:
        with transaction.atomic():
            for k, gpus in enumerate(slots):
                # The first replica's settings on the GPUs placed for this one: every replica
                # runs the same command (scaling refuses a placement whose memory differs).
                own = first.snapshot.with_gpus([gpus])
                out.append(
                    Deployment.objects.create(
                        name=first.name,
                        model_id=first.model_id,
                        revision=first.revision,
                        engine=first.engine,
                        host=first.host,
                        plan=own.to_json(),
                        spans_hosts=first.spans_hosts,
                        auto_restart=first.auto_restart,
                        sleep_after_s=first.sleep_after_s,
                        hub_token_sealed=first.hub_token_sealed,
                        created_by=first.created_by,
                        team_id=first.team_id,
                        replica_of=first,
                        replica_index=start + k,
                    )
                )
    except IntegrityError:
        raise DeploymentError(f"Another change to {first.name} came first; try again.") from None
    return out


def _remember_asked(first: Deployment, replicas: int) -> None:
    """A later launch again starts as many replicas as the deployment has now."""
    again = first.snapshot.with_request(replicas=replicas)
    Deployment.objects.filter(pk=first.pk).update(plan=again.to_json())
    first.refresh_from_db(fields=["plan"])


def _audit(
    user: Any,
    first: Deployment,
    before: int,
    after: int,
    changed: list[int],
    http_request: HttpRequest | None,
) -> None:
    audit_record(
        actor=user,
        action="deployment.scale",
        target_type="deployment",
        target_id=first.pk,
        request=http_request,
        detail={
            "name": first.name,
            "host": first.host.name,
            "replicas_before": before,
            "replicas": after,
            ("replica_ids_added" if after > before else "replica_ids_stopped"): changed,
        },
    )

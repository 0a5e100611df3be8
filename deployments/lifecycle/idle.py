"""The web side of idle deployments: the idle setting, and waking one for a request.

The host worker puts an idle deployment to sleep or scales it to zero (deployments.host.idle);
here a request that finds it so starts the way back: one wake per deployment however many
requests arrive (deployments.live.idle.claim_wake), sent as the host task `deployments.wake`
for a sleeping vLLM engine, or, for a deployment scaled to zero, a start on demand: its leases
taken again with the launch's own locked check (lifecycle.reservations), the row back to
`pending`, and the ordinary `deployments.launch` on the host queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from controlpanel.audit import audit_record
from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from controlpanel.roles import Role
from deployments.engines import platforms
from deployments.lifecycle.dispatch import SEND_RETRY_POLICY, enqueue
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.reservations import reserve_bytes
from deployments.lifecycle.services import require_role
from deployments.live import idle as idle_marks
from deployments.models import Deployment, GpuLease, Status
from teams import membership

MIN_SLEEP_AFTER_S = 1
MAX_SLEEP_AFTER_S = 7 * 24 * 3600


def minutes_to_s(minutes: float | None) -> int | None:
    """A form's or the API's minutes as the column's whole seconds (None: never)."""
    return None if minutes is None else max(MIN_SLEEP_AFTER_S, round(minutes * 60))


ASLEEP = (Status.SLEEPING, Status.SCALED_TO_ZERO)
WAKING = (Status.PENDING, Status.STARTING)  # a start on demand on its way


def idle_setting_update(
    *,
    user: Any,
    deployment: Deployment,
    sleep_after_s: int | None,
    http_request: HttpRequest | None = None,
) -> Deployment:
    """Sleep (or scale to zero) after `sleep_after_s` without a request; None: never. On every
    replica. Only vLLM on a GPU sleeps (engines.platforms: the audit row says what this one
    will do); a running vLLM engine started without sleep mode is scaled to zero instead until
    its next start adds the flag."""
    require_role(user, Role.OPERATOR)
    if sleep_after_s is not None and not MIN_SLEEP_AFTER_S <= sleep_after_s <= MAX_SLEEP_AFTER_S:
        raise DeploymentError("Sleep after: from 1 second to 7 days, or empty for never.")
    with transaction.atomic():
        rows = list(deployment.group().select_for_update())
        first = rows[0]
        if problem := membership.act_problem(user, first.team_id, first.name, "changing"):
            raise DeploymentError(problem)
        Deployment.objects.filter(pk__in=[r.pk for r in rows]).update(sleep_after_s=sleep_after_s)
        audit_record(
            actor=user,
            action="deployment.idle_setting",
            target_type="deployment",
            target_id=first.pk,
            request=http_request,
            detail={
                "name": first.name,
                "sleep_after_s": sleep_after_s,
                "when_idle": platforms.idle_words(first.engine, first.engine_device),
            },
        )
    first.sleep_after_s = sleep_after_s
    return first


@dataclass(frozen=True, slots=True)
class WakeAnswer:
    asleep: bool  # the deployment was sleeping or scaled to zero: the request may wait
    problem: str = ""  # why it cannot wake now (no GPU memory for a start): refuse at once


def wake_for_request(*, name: str, reason: str) -> WakeAnswer:
    """Start waking deployment `name` if it sleeps or is scaled to zero, or say that it is
    already waking (started on demand: pending or starting under a wake mark), so that the
    request waits for it. A sleeping row's wake task is sent by the first caller only; a start
    on demand is a compare-and-set under the row's lock, so a second caller changes nothing."""
    rows = list(Deployment.objects.filter(name=name, status__in=ASLEEP).select_related("host"))
    if not rows:
        if _scaling_to_zero(name):  # held until it has, then started again (gateway.wake)
            return WakeAnswer(asleep=True)
        coming = Deployment.objects.filter(name=name, status__in=WAKING).exists()
        return WakeAnswer(asleep=coming and idle_marks.waking(name))
    first_caller = idle_marks.claim_wake(name, settings.SHARDBOARD_WAKE_HOLD_S)
    for row in (r for r in rows if r.status == Status.SLEEPING and first_caller):
        celery_app.send_task(
            "deployments.wake",
            args=[row.pk, reason],
            queue=host_queue(row.host.name),
            retry=True,
            retry_policy=SEND_RETRY_POLICY,
        )
    try:
        for row in (r for r in rows if r.status == Status.SCALED_TO_ZERO):
            start_on_demand(deployment_id=row.pk, reason=reason)
    except DeploymentError as exc:
        idle_marks.wake_done(name)
        return WakeAnswer(asleep=True, problem=str(exc))
    return WakeAnswer(asleep=True)


def _scaling_to_zero(name: str) -> bool:
    """A replica of `name` is stopping because it went idle (its going-idle mark committed),
    not because someone stopped it."""
    stopping = list(
        Deployment.objects.filter(name=name, status=Status.STOPPING).values_list("pk", flat=True)
    )
    marks = idle_marks.going_state(stopping) if stopping else {}
    return idle_marks.COMMITTED in marks.values()


def start_on_demand(*, deployment_id: int, reason: str) -> bool:
    """A scaled-to-zero replica started again on the GPUs and bytes it leased before, in one
    transaction with the launch's locked check; raises DeploymentError when they are taken."""
    with transaction.atomic():
        row = Deployment.objects.select_for_update().select_related("host").get(pk=deployment_id)
        if row.status != Status.SCALED_TO_ZERO:
            return False
        wanted = _last_leases(row)
        reserve_bytes([row], row.host, [wanted])
        row.transition(
            Status.PENDING, reason=f"starting on demand: {reason}", woke_at=timezone.now()
        )
        audit_record(
            actor=None,
            action="deployment.wake",
            target_type="deployment",
            target_id=row.group_id,
            detail={"name": row.name, "replica_id": row.pk, "how": "start", "reason": reason},
        )
        transaction.on_commit(lambda: enqueue("deployments.launch", row, [row]))  # pushes too
    return True


def _last_leases(row: Deployment) -> dict[tuple[str, int], int]:
    """(host, GPU index) → bytes of the leases released when the replica scaled to zero."""
    last = row.leases.filter(active=False).order_by("-released_at").first()
    if last is None or last.released_at is None:
        raise DeploymentError(f"{row.name}: no earlier lease to start it again on.")
    leases = GpuLease.objects.filter(
        deployment=row, active=False, released_at=last.released_at
    ).select_related("gpu__host")
    return {(lease.gpu.host.name, lease.gpu.index): lease.memory_bytes for lease in leases}

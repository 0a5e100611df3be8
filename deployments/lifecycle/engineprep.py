"""The web side of the engines each host prepares: what the pages show, what a launch is told,
and an operator's retry of a preparation that failed.

The rows are the host workers' (deployments.host.prepare); here they are only read, and a
retry is an audit row plus the task `deployments.prepare_engine` on the host's queue.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.http import HttpRequest

from controlpanel.audit import audit_record
from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from controlpanel.roles import Role
from deployments.lifecycle.checks import online_host, require_role
from deployments.lifecycle.dispatch import SEND_RETRY_POLICY
from deployments.lifecycle.errors import DeploymentError
from deployments.models import Engine, EnginePrep, PrepState
from monitoring.models import Host

log = logging.getLogger(__name__)

# The order the pages list them in: the one most launches use first.
ORDER = {Engine.VLLM: 0, Engine.TRANSFORMERS: 1, Engine.LLAMACPP: 2}


@dataclass(frozen=True, slots=True)
class HostEngines:
    host: Host
    rows: list[EnginePrep]

    @property
    def all_ready(self) -> bool:
        return all(r.state == PrepState.READY for r in self.rows)


def host_engines(host_names: list[str] | None = None) -> list[HostEngines]:
    """Each host in service with the engines its worker reported, for the pages."""
    rows = EnginePrep.objects.filter(host__retired_at__isnull=True).select_related("host")
    if host_names is not None:
        rows = rows.filter(host__name__in=host_names)
    by_host: dict[int, HostEngines] = {}
    for row in sorted(rows, key=lambda r: (r.host.name, ORDER.get(Engine(r.engine), 9))):
        by_host.setdefault(row.host_id, HostEngines(row.host, [])).rows.append(row)
    return list(by_host.values())


def engine_state(host: Host, engine: str) -> EnginePrep | None:
    """The host's row for the engine; None when its worker has not said (an older worker)."""
    return EnginePrep.objects.filter(host=host, engine=engine).first()


def launch_problem(host: Host, engine: str) -> str | None:
    """Why a launch on `engine` cannot go to `host` (its preparation failed there, or the
    host does not have it and is not preparing it); None: it may go (ready, being prepared:
    the launch then waits for it, or not reported)."""
    row = engine_state(host, engine)
    if row is None or row.state in (PrepState.READY, PrepState.PREPARING):
        return None
    label = row.get_engine_display()
    if row.state == PrepState.FAILED:
        return (
            f"{label} could not be prepared on {host.name}: {row.error} Retry it from the "
            "dashboard (Engines), or launch on another engine."
        )
    return f"{label} is not installed on {host.name}: {row.note}. Launch on another engine."


def waiting_note(host: Host, engine: str) -> str:
    """What a user who launched on an engine still being prepared should know ('' if ready)."""
    row = engine_state(host, engine)
    if row is None or row.state != PrepState.PREPARING:
        return ""
    progress = f" ({row.percent} %)" if row.percent is not None else ""
    return (
        f"{row.get_engine_display()} is still being prepared on {host.name}{progress}: the "
        "deployment waits for it and starts as soon as it is ready. To start at once, stop it "
        "and launch on an engine that is ready."
    )


def engine_prep_retry(
    *, user: Any, host_name: str, engine: str, http_request: HttpRequest | None = None
) -> EnginePrep:
    """Prepare `engine` on `host_name` again: a failed preparation, or one the host skipped."""
    require_role(user, Role.OPERATOR)
    host = online_host(host_name)
    with transaction.atomic():
        row = EnginePrep.objects.select_for_update().filter(host=host, engine=engine).first()
        if row is None:
            raise DeploymentError(f"{host_name} has not reported an engine {engine!r}.")
        if row.state in (PrepState.READY, PrepState.PREPARING):
            raise DeploymentError(
                f"{row.get_engine_display()} is {row.get_state_display().lower()} on {host_name}."
            )
        audit_record(
            actor=user,
            action="engine.prepare_retry",
            target_type="host",
            target_id=host.pk,
            request=http_request,
            detail={
                "host": host.name,
                "engine": engine,
                "was": row.state,
                "error": row.error[:500],
                "attempt": row.attempt + 1,
            },
        )
        sent: list[bool] = []
        transaction.on_commit(partial(_send, host.name, engine, sent))
    if sent == [False]:  # empty: an outer transaction sends it when it commits
        raise DeploymentError(
            f"The task queue (Redis) did not answer, so {host_name} was not asked to prepare "
            f"{row.get_engine_display()} again; retry once Redis is back."
        )
    return row


def _send(host_name: str, engine: str, sent: list[bool]) -> None:
    try:
        celery_app.send_task(
            "deployments.prepare_engine",
            args=[engine],
            queue=host_queue(host_name),
            retry=True,
            retry_policy=SEND_RETRY_POLICY,
        )
    except Exception as exc:  # kombu raises several kinds; the audit row is committed
        log.warning("could not send the retry of %s to %s: %s", engine, host_name, exc)
        sent.append(False)
    else:
        sent.append(True)

"""Retiring a GPU host that is gone: it leaves every list and plan target, its history stays.

Here rather than in monitoring because the check reads deployments' leases, and monitoring
never imports deployments.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from controlpanel.audit import audit_record
from controlpanel.roles import Role, has_role
from deployments.models import ACTIVE, Deployment
from monitoring.models import Host


class HostRetireError(Exception):
    """Refused: the message says why and what to do first."""


@transaction.atomic
def host_retire(*, user: Any, name: str, http_request: HttpRequest | None = None) -> Host:
    """Mark an offline host with no active deployment retired, with its audit row."""
    if not has_role(user, Role.ADMIN):
        raise HostRetireError("Retiring a host needs the admin role.")
    host = Host.objects.select_for_update().filter(name=name, retired_at__isnull=True).first()
    if host is None:
        raise HostRetireError(f"There is no host {name!r} in service.")
    if host.is_online():
        raise HostRetireError(
            f"{name} is online: its host worker still sends heartbeats. Stop the worker first."
        )
    active = list(
        Deployment.objects.filter(host=host, status__in=list(ACTIVE)).values_list("name", flat=True)
    )
    if active:
        raise HostRetireError(
            f"{name} still has active deployments ({', '.join(sorted(set(active)))}): stop them first."
        )
    host.retired_at = timezone.now()
    host.save(update_fields=["retired_at"])
    audit_record(
        actor=user,
        action="host.retire",
        target_type="host",
        target_id=host.pk,
        detail={"host": name},
        request=http_request,
    )
    return host

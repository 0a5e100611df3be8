"""Retiring a host that is gone: admins only, offline and idle only, audited, undone by a worker."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments.models import Deployment
from monitoring.host.registration import host_heartbeat
from monitoring.models import Host


def make_host(name: str, *, online: bool) -> Host:
    beat = timezone.now() if online else None
    return Host.objects.create(name=name, queue=f"host.{name}", last_heartbeat=beat)


def retire(client: Client, name: str) -> str:
    response = client.post(f"/hosts/{name}/retire/", follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_admin_retires_an_offline_host(client: Client, admin_user: Any) -> None:
    make_host("gone", online=False)
    client.force_login(admin_user)
    assert "Retire host" in client.get("/").content.decode()
    html = retire(client, "gone")
    assert "gone is retired" in html and 'data-host="gone"' not in html
    assert Host.objects.get(name="gone").retired_at is not None
    row = AuditEvent.objects.get(action="host.retire")
    assert row.actor == admin_user and row.detail == {"host": "gone"}


def test_online_or_busy_hosts_are_not_retired(client: Client, admin_user: Any) -> None:
    make_host("alive", online=True)
    busy = make_host("busy", online=False)
    Deployment.objects.create(
        name="still-up", model_id="m", host=busy, status="running", created_by=admin_user
    )
    client.force_login(admin_user)
    assert "alive is online" in retire(client, "alive")
    assert "still has active deployments (still-up)" in retire(client, "busy")
    assert not Host.objects.filter(retired_at__isnull=False).exists()
    assert not AuditEvent.objects.filter(action="host.retire").exists()


def test_only_admins_retire(client: Client, operator: Any) -> None:
    make_host("gone", online=False)
    client.force_login(operator)
    assert "Retire host" not in client.get("/").content.decode()
    assert client.post("/hosts/gone/retire/").status_code == 403
    assert client.get("/hosts/gone/retire/").status_code == 405
    assert Host.objects.get(name="gone").retired_at is None


def test_a_worker_that_comes_back_brings_its_host_back(db: None) -> None:
    host = make_host("back", online=False)
    Host.objects.filter(pk=host.pk).update(retired_at=timezone.now())
    assert host_heartbeat(name="back")
    assert Host.objects.get(pk=host.pk).retired_at is None

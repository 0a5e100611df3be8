"""A write through the API is audited exactly as the same action in the UI: the same service
writes the same action, target, actor, client address and detail (less what names the
deployment itself: its name, ids and GPUs)."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments.models import Deployment
from playground import services
from playground.models import Scope
from teams.models import Team
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db

HOST = "parity"
OWN = {"name", "replica_ids", "replica_gpus", "gpus", "replica_ids_added", "replica_ids_stopped"}
FORM = {"model_ref": "local:0/tiny", "host": HOST, "engine": "transformers", "revision": ""}
FORM |= {"dtype": "auto", "kv_cache_dtype": "auto", "replicas": "1", "placement": "spread"}


@pytest.fixture
def clients(model_root: Any, operator: Any) -> tuple[Client, Client]:
    sim_host(HOST, 4)
    ui = Client()
    ui.force_login(operator)
    raw = services.token_create(user=operator, name="ci", scopes=[Scope.DEPLOY])[1]
    return ui, Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def last(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).order_by("-id").first()  # type: ignore[return-value]


def same_row(ui_row: AuditEvent, api_row: AuditEvent) -> None:
    for field in ("action", "target_type", "actor_id", "actor_name", "client_ip"):
        assert getattr(ui_row, field) == getattr(api_row, field), field
    assert set(ui_row.detail) == set(api_row.detail)
    assert {k: v for k, v in ui_row.detail.items() if k not in OWN} == {
        k: v for k, v in api_row.detail.items() if k not in OWN
    }


def test_launch_scale_and_stop_are_audited_alike(clients: tuple[Client, Client]) -> None:
    ui, api = clients
    r = ui.post("/deployments/new/", {**FORM, "name": "via-ui"})
    assert r.status_code == 302, r.content[:500]
    ui_d = Deployment.objects.get(name="via-ui")
    ui_create = last("deployment.create")
    r = api.post(
        "/api/v1/deployments",
        {**FORM, "name": "via-api", "replicas": 1},
        content_type="application/json",
    )
    assert r.status_code == 201, r.content
    api_d = Deployment.objects.get(name="via-api")
    assert r.json()["id"] == api_d.pk
    api_create = last("deployment.create")
    assert (ui_create.target_id, api_create.target_id) == (str(ui_d.pk), str(api_d.pk))
    same_row(ui_create, api_create)

    assert ui.post(f"/deployments/{ui_d.pk}/scale/", {"replicas": "2"}).status_code == 302
    ui_scale = last("deployment.scale")
    r = api.post(
        f"/api/v1/deployments/{api_d.pk}/scale", {"replicas": 2}, content_type="application/json"
    )
    assert r.status_code == 202 and len(r.json()["replicas"]) == 2, r.content
    same_row(ui_scale, last("deployment.scale"))

    assert ui.post(f"/deployments/{ui_d.pk}/stop/").status_code == 302
    ui_stop = last("deployment.stop")
    r = api.post(f"/api/v1/deployments/{api_d.pk}/stop")
    assert r.status_code == 202 and r.json()["status"] == "stopping", r.content
    same_row(ui_stop, last("deployment.stop"))
    assert AuditEvent.objects.filter(action__startswith="deployment.").count() == 6


def test_a_refused_write_is_refused_alike_and_audits_nothing(
    clients: tuple[Client, Client],
) -> None:
    ui, api = clients
    before = AuditEvent.objects.count()
    r = api.post(
        "/api/v1/deployments",
        {**FORM, "name": "huge", "replicas": 5},
        content_type="application/json",
    )
    assert r.status_code == 409, r.content
    message = r.json()["message"]
    assert "hold 4 of the 5 replicas" in message
    r = ui.post("/deployments/new/", {**FORM, "name": "huge", "replicas": "5"})
    assert message in html.unescape(r.content.decode())
    assert AuditEvent.objects.count() == before
    assert not Deployment.objects.filter(name="huge").exists()


def test_a_launch_for_a_team_is_checked_and_audited_alike(
    clients: tuple[Client, Client], operator: Any
) -> None:
    ui, api = clients
    for name in ("red", "blue"):
        Team.objects.create(name=name, max_gpus=2).members.add(operator)
    Team.objects.create(name="green")
    r = api.post("/api/v1/deployments", {**FORM, "name": "nameless"}, content_type="application/json")  # fmt: skip
    assert r.status_code == 409 and "several teams (blue, red)" in r.json()["message"], r.content
    r = api.post(
        "/api/v1/deployments", {**FORM, "name": "theirs", "team": "green"}, content_type="application/json"
    )  # fmt: skip
    assert r.status_code == 422, r.content
    assert r.json()["message"].startswith("body.team: You are not in team green")
    assert "Admin role" in r.json()["message"]
    r = api.post(
        "/api/v1/deployments", {**FORM, "name": "big", "team": "red", "replicas": 3}, content_type="application/json"
    )  # fmt: skip
    assert r.status_code == 409 and "red" in r.json()["message"], r.content
    assert (
        ui.post("/deployments/new/", {**FORM, "name": "via-ui", "team": "red"}).status_code == 302
    )
    ui_create = last("deployment.create")
    r = api.post(
        "/api/v1/deployments", {**FORM, "name": "via-api", "team": "red"}, content_type="application/json"
    )  # fmt: skip
    assert r.status_code == 201, r.content
    assert r.json()["team"] == "red" and r.json()["hosts"] == [HOST]
    same_row(ui_create, last("deployment.create"))
    assert last("deployment.create").detail["team"] == "red"
    listed = ui.get("/api/v1/deployments?team=red").json()  # the session: this token deploys only
    assert sorted(d["name"] for d in listed) == ["via-api", "via-ui"]
    assert ui.get("/api/v1/deployments?team=blue").json() == []


def test_further_hosts_are_checked_as_the_form_checks_them(clients: tuple[Client, Client]) -> None:
    _ui, api = clients
    before = AuditEvent.objects.count()
    body = {**FORM, "name": "span", "engine": "vllm", "hosts": [HOST]}
    r = api.post("/api/v1/deployments", body, content_type="application/json")
    assert r.status_code == 409 and "not the first host again" in r.json()["message"], r.content
    r = api.post(
        "/api/v1/deployments", {**body, "hosts": ["nowhere"]}, content_type="application/json"
    )
    assert r.status_code == 422 and r.json()["message"].startswith("body.hosts:"), r.content
    assert AuditEvent.objects.count() == before

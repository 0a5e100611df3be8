"""The idle setting on the launch form, the deployment page and the API; "Sleeping" and
"Scaled to zero" with the last wake time on the pages that show a deployment's state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments.lifecycle.forms import LaunchForm
from deployments.models import Deployment, Status
from monitoring.models import Host
from playground import services
from playground.models import Scope

pytestmark = pytest.mark.django_db

WOKE = datetime(2026, 12, 5, 9, 30, 15, tzinfo=UTC)


@pytest.fixture
def dozy(operator: Any) -> Deployment:
    host = Host.objects.create(name="idle-a", queue="host.idle-a", simulated=False)
    return Deployment.objects.create(
        name="dozy",
        model_id="org/dozy",
        engine="vllm",
        host=host,
        created_by=operator,
        status=Status.SLEEPING,
        sleep_after_s=900,
        sleep_level=1,
        slept_at=WOKE,
        woke_at=WOKE,
    )


def test_pages_show_sleeping_with_the_last_wake(client: Client, viewer: Any, dozy: Any) -> None:
    client.force_login(viewer)
    listed = client.get("/deployments/").content.decode()
    assert "status-sleeping" in listed and "Sleeping" in listed and "woke " in listed
    page = client.get(f"/deployments/{dozy.pk}/").content.decode()
    assert "Sleeping" in page and "sleeps after 15.0 min without a request" in page
    assert "sleeping since 2026-12-05 09:30:15" in page and "(level 1)" in page
    assert "last woke 2026-12-05 09:30:15" in page
    assert 'id="idle-form"' not in page  # a viewer may not change it
    Deployment.objects.filter(pk=dozy.pk).update(status=Status.SCALED_TO_ZERO, sleep_level=None)
    page = client.get(f"/deployments/{dozy.pk}/").content.decode()
    assert "Scaled to zero" in page and "scaled to zero since" in page
    dashboard = client.get("/").content.decode()  # still listed: a request starts it again
    assert f'data-group-status="{dozy.pk}">Scaled to zero' in dashboard and "woke " in dashboard


def test_operator_sets_and_clears_it_on_the_page(client: Client, operator: Any, dozy: Any) -> None:
    client.force_login(operator)
    assert 'id="idle-form"' in client.get(f"/deployments/{dozy.pk}/").content.decode()
    client.post(f"/deployments/{dozy.pk}/idle/", {"sleep_after_min": "2.5"})
    dozy.refresh_from_db()
    assert dozy.sleep_after_s == 150
    client.post(f"/deployments/{dozy.pk}/idle/", {"sleep_after_min": ""})
    dozy.refresh_from_db()
    assert dozy.sleep_after_s is None
    rows = AuditEvent.objects.filter(action="deployment.idle_setting").order_by("id")
    assert [r.detail["sleep_after_s"] for r in rows] == [150, None]
    refused = client.post(
        f"/deployments/{dozy.pk}/idle/", {"sleep_after_min": "20000"}, follow=True
    )
    assert "from 1 second to 7 days" in refused.content.decode()


def test_the_api_sets_it_and_shows_it(operator: Any, dozy: Any) -> None:
    raw = services.token_create(user=operator, name="ci", scopes=[Scope.DEPLOY, Scope.READ])[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    answer = api.put(
        f"/api/v1/deployments/{dozy.pk}/idle",
        data={"sleep_after_min": 30},
        content_type="application/json",
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["sleep_after_min"] == 30 and body["status"] == "sleeping"
    assert body["woke_at"].startswith("2026-12-05T09:30:15")
    assert Deployment.objects.get(pk=dozy.pk).sleep_after_s == 1800


def test_the_launch_form_takes_minutes(operator: Any) -> None:
    Host.objects.create(name="idle-b", queue="host.idle-b", simulated=True)
    form = LaunchForm(
        {
            "name": "napper",
            "model_ref": "local:0/tiny",
            "host": "idle-b",
            "engine": "vllm",
            "dtype": "auto",
            "kv_cache_dtype": "auto",
            "sleep_after_min": "0.5",
        }
    )
    assert form.is_valid(), form.errors
    assert form.launch_request().sleep_after_s == 30

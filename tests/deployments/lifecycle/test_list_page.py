"""The deployments list: every role that may see it gets the table, with its filters working."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from deployments.models import Deployment, Status
from monitoring.models import Host

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(operator: Any) -> list[Deployment]:
    a = Host.objects.create(name="list-a", queue="host.list-a", simulated=True)
    b = Host.objects.create(name="list-b", queue="host.list-b", simulated=False)
    return [
        Deployment.objects.create(
            name="alpha", model_id="/m/a", engine="transformers", host=a, created_by=operator
        ),
        Deployment.objects.create(
            name="beta",
            model_id="org/beta",
            engine="vllm",
            host=b,
            created_by=operator,
            status=Status.FAILED,
            failure_reason="CUDA out of memory",
        ),
    ]


def test_list_renders_rows_and_filters(
    client: Client, viewer: Any, outsider: Any, rows: list[Deployment]
) -> None:
    assert client.get("/deployments/").status_code == 302  # anonymous: to the login page
    client.force_login(outsider)
    assert client.get("/deployments/").status_code == 403
    client.force_login(viewer)
    page = client.get("/deployments/")
    html = page.content.decode()
    assert page.status_code == 200 and "alpha" in html and "beta" in html
    assert f'data-status-for="{rows[1].pk}"' in html and "+ launch" not in html
    failed = client.get("/deployments/", {"status": Status.FAILED}).content.decode()
    assert "beta" in failed and "alpha" not in failed
    on_a = client.get("/deployments/", {"host": "list-a"}).content.decode()
    assert "alpha" in on_a and "beta" not in on_a


def test_operator_sees_the_launch_link(client: Client, operator: Any) -> None:
    client.force_login(operator)
    page = client.get("/deployments/")
    assert page.status_code == 200 and "+ launch" in page.content.decode()

"""Every page of the menu in a real browser, as an admin, with a live host worker and a
deployment: no uncaught exception and no console error on any of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deployments.models import Deployment
from monitoring.models import Host
from tests.support.browser import login
from tests.support.catalog import BIG
from tests.support.hubstub import HubStub
from tests.support.live_server import LiveServer
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker]
HOST = "pageshost"


@pytest.mark.timeout(300)  # every page with a live host worker: 39 s here, more on a loaded CI
def test_no_page_has_an_error(
    host_worker: Any,
    model_root: Path,
    hub: HubStub,
    asgi_server: LiveServer,
    page: Any,
    admin_user: Any,
) -> None:
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    start_sim_worker(host_worker, HOST, model_root)
    d = Deployment.objects.create(
        name="ended",
        model_id="m",
        host=Host.objects.get(name=HOST),
        created_by=admin_user,
        status="stopped",
    )
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: pageerror: {exc}"))
    page.on(
        "console",
        lambda m: errors.append(f"{page.url}: console: {m.text}") if m.type == "error" else None,
    )
    login(page, asgi_server, admin_user.username)
    paths = ["/", "/models/", f"/models/{BIG}/", "/models/local/0/tiny/", "/deployments/"]
    paths += ["/deployments/new/", f"/deployments/{d.pk}/", "/playground/", "/gpus/topology/"]
    paths += ["/audit/", "/admin/", "/tokens/", "/api/v1/docs", "/models/on-hosts/", "/usage/"]
    for path in paths:
        response = page.goto(f"{asgi_server.url}{path}")
        assert response is not None and response.status == 200, path
        page.wait_for_timeout(1500)  # live pushes, charts and re-plans have their turn
    assert errors == []

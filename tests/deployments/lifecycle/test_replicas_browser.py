"""A real browser on the list of a deployment of two replicas: one replica's engine dies, the
deployment turns degraded without a reload by hand, and the gateway answers from the other."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment
from tests.deployments.lifecycle.test_detail_browser import assert_fits_the_viewport
from tests.support.browser import login
from tests.support.gateway import bearer_for
from tests.support.live_server import LiveServer
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "replicabrowser"


def statuses(rows: list[Deployment]) -> list[str]:
    return [Deployment.objects.get(pk=r.pk).status for r in rows]


def test_a_dead_replica_degrades_the_deployment_and_the_other_answers(
    host_worker: Any,
    model_root: Any,
    asgi_server: LiveServer,
    page: Any,
    operator: Any,
    tmp_path: Path,
) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root)
    request = LaunchRequest(
        name="pair",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",
        plan_request=planning.PlanRequest(),
        replicas=2,
    )
    d = deployment_create(user=operator, request=request)
    rows = list(d.group())
    try:
        wait_for(lambda: statuses(rows) == ["running", "running"], timeout_s=150, interval_s=0.5)
    except AssertionError:
        print(worker.log(), [Deployment.objects.get(pk=r.pk).failure_reason for r in rows])
        raise
    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/deployments/")
    badge = page.locator(f"[data-group-status='{d.pk}']")
    summary = page.locator(f"[data-replica-summary='{d.pk}']")
    assert badge.inner_text() == "Running" and summary.inner_text() == "2/2 replicas running"

    second = Deployment.objects.get(pk=rows[1].pk)
    os.killpg(second.pgid, signal.SIGKILL)
    page.wait_for_function(
        f"""() => document.querySelector("[data-group-status='{d.pk}']").textContent
            === 'Degraded'""",
    )
    assert summary.inner_text() == "1/2 replicas running"
    assert statuses(rows) == ["running", "failed"]

    def answered() -> bool:  # the gateway keeps a name's target for a moment at most
        response = httpx.post(
            f"{asgi_server.url}/v1/completions",
            json={"model": "pair", "prompt": "1 + 1 =", "max_tokens": 2},
            headers=headers,
            timeout=60,
        )
        return response.status_code == 200

    headers = bearer_for(operator)
    wait_for(answered, interval_s=0.5)
    for _ in range(5):  # every answer now comes from the replica that runs
        assert answered()

    page.goto(f"{asgi_server.url}/deployments/{d.pk}/")
    assert page.locator("#replicas tr[data-replica='2'] .badge").inner_text() == "Failed"
    assert_fits_the_viewport(page, tmp_path)
    assert page.locator("#stop-button").inner_text() == "Stop all 2 replicas"
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#stop-button").click()
    wait_for(lambda: statuses(rows) == ["stopped", "failed"], interval_s=0.2)

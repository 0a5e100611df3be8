"""Two replicas end to end with real parts: a real host worker on four simulated GPUs, two real
transformers engines, the /v1/ gateway on a real server."""

from __future__ import annotations

import os

import httpx
import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, GpuLease, Status
from tests.support.gateway import bearer_for, session_for
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "replicahost"


def statuses(rows: list[Deployment]) -> list[str]:
    for r in rows:
        r.refresh_from_db()
    return [r.status for r in rows]


def test_two_replicas_run_answer_and_stop(
    host_worker, model_root, asgi_server, operator, viewer
) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root)
    request = LaunchRequest(
        name="twin",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",
        plan_request=planning.PlanRequest(),
        replicas=2,
    )
    d = deployment_create(user=operator, request=request)
    rows = list(d.group())
    assert len(rows) == 2
    try:
        wait_for(
            lambda: all(s in ("running", "failed") for s in statuses(rows)),
            timeout_s=150,
            interval_s=0.5,
        )
    except AssertionError:
        print(worker.log())
        raise
    assert statuses(rows) == ["running", "running"], [r.failure_reason for r in rows]
    assert rows[0].port != rows[1].port and rows[0].pgid != rows[1].pgid
    gpus = [set(r.leases.filter(active=True).values_list("gpu__index", flat=True)) for r in rows]
    assert len(gpus[0]) == len(gpus[1]) == 1 and not gpus[0] & gpus[1]
    for r in rows:  # each engine answers on its own port
        direct = httpx.post(
            f"{r.base_url}/v1/completions", json={"prompt": "1 +", "max_tokens": 2}, timeout=30
        )
        assert direct.status_code == 200
    answer = httpx.post(
        f"{asgi_server.url}/v1/completions",
        json={"model": "twin", "prompt": "1 + 1 =", "max_tokens": 4},
        headers=bearer_for(operator),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"] is not None
    models = httpx.get(f"{asgi_server.url}/v1/models", headers=bearer_for(operator), timeout=10)
    assert [m["id"] for m in models.json()["data"]] == ["twin"]  # one name, not one per replica
    cookies, _ = session_for(viewer)
    with httpx.Client(base_url=asgi_server.url, cookies=cookies, timeout=30) as browser:
        listing = browser.get("/deployments/").text
        page = browser.get(f"/deployments/{d.pk}/").text
    assert "2/2 replicas running" in listing and listing.count('<tr data-id="') == 1
    assert str(rows[0].port) in page and str(rows[1].port) in page
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: statuses(rows) == ["stopped", "stopped"], interval_s=0.2)
    assert not GpuLease.objects.filter(deployment__in=rows, active=True).exists()
    for r in rows:
        with pytest.raises(ProcessLookupError):
            os.killpg(r.pgid, 0)
        events = list(r.events.values_list("new_status", flat=True))
        assert events == ["pending", "starting", "running", "stopping", "stopped"]
    assert AuditEvent.objects.filter(action="deployment.stop").count() == 1
    assert AuditEvent.objects.filter(action="deployment.spawn").count() == 2
    assert {r.status for r in Deployment.objects.all()} == {Status.STOPPED}

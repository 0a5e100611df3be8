"""The scaling policy through the API and the page's section, and the controller's pass on a
stand-in engine: a decision that the GPUs cannot hold is recorded with the planner's reason."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.autoscale import series
from deployments.autoscale.controller import Controller
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, ScalingPolicy, Status
from playground.models import Scope
from playground.services import token_create
from tests.support.hosts import sim_host
from tests.support.llama_server import free_port
from tests.support.standins import standin
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "policyhost"
POLICY = {"min_replicas": 0, "max_replicas": 3, "ttft_p90_s": 2.0, "up_after_s": 10}


def launched(operator: Any, gpus: int = 2) -> Deployment:
    sim_host(HOST, gpus)
    request = LaunchRequest(name="chat", model_ref="local:0/tiny", host_name=HOST,
                            plan_request=planning.PlanRequest())  # fmt: skip
    d = deployment_create(user=operator, request=request)
    Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING)
    d.refresh_from_db()
    return d


def api_token(user: Any) -> str:
    _, raw = token_create(user=user, name="api", scopes=(Scope.READ, Scope.DEPLOY))
    return f"Bearer {raw}"


def test_policy_api_round_trip_audited_and_checked(
    model_root: Any, operator: Any, viewer: Any
) -> None:
    d = launched(operator)
    url = f"/api/v1/deployments/{d.pk}/scaling-policy"
    api = Client()
    token = api_token(operator)
    assert api.get(url, HTTP_AUTHORIZATION=token).status_code == 404
    put = api.put(url, POLICY, content_type="application/json", HTTP_AUTHORIZATION=token)
    assert put.status_code == 200, put.content
    assert put.json()["set_by"] == operator.username and put.json()["min_replicas"] == 0
    assert api.get(url, HTTP_AUTHORIZATION=token).json()["ttft_p90_s"] == 2.0
    no_target = {"min_replicas": 1, "max_replicas": 2}
    refused = api.put(url, no_target, content_type="application/json", HTTP_AUTHORIZATION=token)
    assert refused.status_code == 409 and "Give a target" in refused.json()["message"]
    upside_down = POLICY | {"min_replicas": 3, "max_replicas": 2}
    assert api.put(url, upside_down, content_type="application/json",
                   HTTP_AUTHORIZATION=token).status_code == 409  # fmt: skip
    viewer_token = api_token(viewer)
    assert api.delete(url, HTTP_AUTHORIZATION=viewer_token).status_code == 403
    assert api.delete(url, HTTP_AUTHORIZATION=token).status_code == 204
    assert not ScalingPolicy.objects.exists()
    rows = AuditEvent.objects.filter(action="deployment.autoscale_policy", target_id=str(d.pk))
    assert [r.detail.get("cleared", False) for r in rows.order_by("id")] == [False, True]


def test_page_section_shows_the_form_and_says_what_min_zero_means(
    model_root: Any, operator: Any
) -> None:
    d = launched(operator)
    browser = Client()
    browser.force_login(operator)
    html = browser.get(f"/deployments/{d.pk}/autoscale/").content.decode()
    assert "No scaling policy" in html and "never goes below 1 replica" in html
    saved = browser.post(f"/deployments/{d.pk}/autoscale/policy/",
                         {**POLICY, "down_after_s": 60}, follow=True)  # fmt: skip
    assert "Scaling policy of chat saved." in saved.content.decode()
    assert "p90 TTFT ≤ 2.0 s" in browser.get(f"/deployments/{d.pk}/autoscale/").content.decode()
    chart = browser.get(f"/deployments/{d.pk}/autoscale/chart/").json()
    assert chart["live_replicas"] == 1 and chart["policy"]["ttft_p90_s"] == 2.0


def test_a_scale_up_the_gpus_cannot_hold_is_recorded_with_the_reason(
    model_root: Any, operator: Any
) -> None:
    d = launched(operator, gpus=1)  # the one GPU is taken: no room for a second replica
    port = free_port()
    Deployment.objects.filter(pk=d.pk).update(port=port)
    ScalingPolicy.objects.create(deployment=d, set_by=operator, min_replicas=1, max_replicas=2,
                                 waiting_per_replica=1, up_after_s=1)  # fmt: skip
    series._redis().delete(series.key(d.pk))
    controller = Controller()
    with standin("--max-num-seqs", "1", port=port, VLLM_STANDIN_TOKEN_S="0.2") as url:
        body = {"model": "tiny", "prompt": "x", "max_tokens": 40}
        with ThreadPoolExecutor(4) as pool:
            for _ in range(4):
                pool.submit(httpx.post, f"{url}/v1/completions", json=body, timeout=60)
            now = time.time()
            wait_for(lambda: controller.tick(now_s=now)[0].current == 1
                     and series.read(d.pk)[-1]["waiting"] >= 2)  # fmt: skip
            decision = controller.tick(now_s=now + 1.5)[0]
    assert decision.replicas == 2 and decision.reason.startswith("waiting a replica")
    row = AuditEvent.objects.get(action="deployment.autoscale", target_id=str(d.pk))
    assert "Cannot add 1 replica(s) to chat" in row.detail["refused"]
    assert row.detail["figures"]["waiting"] >= 2 and row.actor == operator
    policy = ScalingPolicy.objects.get(deployment=d)
    assert "refused" in policy.last_decision and policy.last_change_at is None
    assert d.group().count() == 1

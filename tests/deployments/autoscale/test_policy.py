"""The scaling policy through the API and the page's section. The controller's pass on a real
engine's /metrics is in tests/deployments/host/test_vllm_engine.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, ScalingPolicy, Status
from playground.models import Scope
from playground.services import token_create
from tests.support.hosts import sim_host

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

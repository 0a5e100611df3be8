"""A scaling policy in the API's launch body: created with the deployment and read back through
GET …/scaling-policy; a bad one is a 422 naming the field, and nothing is launched. The launches
never reach a worker: the `db` fixture's transaction is rolled back before any on-commit task."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments.models import Deployment, ScalingPolicy
from playground.models import Scope
from playground.services import token_create
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
HOST = "apipolicy"
BODY = {"name": "elastic", "model_ref": "local:0/tiny", "host": HOST, "engine": "transformers"}


@pytest.fixture
def token(model_root: Any, operator: Any) -> str:
    sim_host(HOST, 4)
    _, raw = token_create(user=operator, name="api", scopes=(Scope.READ, Scope.DEPLOY))
    return f"Bearer {raw}"


def launch(token: str, **body: Any) -> Any:
    return Client().post("/api/v1/deployments", {**BODY, **body},
                         content_type="application/json", HTTP_AUTHORIZATION=token)  # fmt: skip


def test_a_launch_with_a_policy_creates_it_and_the_policy_get_shows_it(
    token: str, operator: Any
) -> None:
    wanted = {"max_replicas": 4, "tpot_p90_s": 0.05, "up_after_s": 20}
    response = launch(token, replicas=2, scaling_policy=wanted)
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    got = Client().get(f"/api/v1/deployments/{pk}/scaling-policy", HTTP_AUTHORIZATION=token)
    assert got.status_code == 200, got.content
    policy = got.json()
    assert (policy["min_replicas"], policy["max_replicas"], policy["tpot_p90_s"]) == (2, 4, 0.05)
    assert (policy["up_after_s"], policy["down_after_s"]) == (20.0, 60.0)
    assert policy["set_by"] == operator.username
    created = AuditEvent.objects.get(action="deployment.create", target_id=str(pk))
    assert created.detail["scaling_policy"] is True
    assert AuditEvent.objects.filter(action="deployment.autoscale_policy", target_id=str(pk),
                                     detail__at_launch=True).count() == 1  # fmt: skip


def test_a_launch_without_one_has_none(token: str) -> None:
    response = launch(token)
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    got = Client().get(f"/api/v1/deployments/{pk}/scaling-policy", HTTP_AUTHORIZATION=token)
    assert got.status_code == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"scaling_policy": {"max_replicas": 3}},
         "body.scaling_policy: Autoscaling: Give a target"),
        ({"scaling_policy": {"max_replicas": 3, "min_replicas": 4, "kv_usage": 0.5}},
         "body.scaling_policy: Autoscaling: Replicas: 0 ≤ min ≤ max"),
        ({"replicas": 3, "scaling_policy": {"max_replicas": 2, "kv_usage": 0.5}},
         "body.scaling_policy.max_replicas: Max replicas (2) is below the 3 launched."),
        ({"replicas": "max", "scaling_policy": {"max_replicas": 2, "kv_usage": 0.5}},
         "body.replicas: Autoscaling starts from a number of replicas, not max"),
        ({"hosts": ["second"], "scaling_policy": {"max_replicas": 2, "kv_usage": 0.5}},
         "body.hosts: A replica spanning further hosts is never scaled"),
        ({"scaling_policy": {"max_replicas": 2, "kv_usage": 1.5}},
         "body.scaling_policy.kv_usage: Input should be less than or equal to 1"),
        ({"scaling_policy": {"ttft_p90_s": 2}}, "body.scaling_policy.max_replicas: Field required"),
    ],
)  # fmt: skip
def test_a_bad_policy_is_a_422_naming_the_field_and_launches_nothing(
    token: str, body: dict[str, Any], message: str
) -> None:
    sim_host("second", 4)
    response = launch(token, **body)
    assert response.status_code == 422, response.content
    assert response.json()["message"].startswith(message), response.json()
    assert not Deployment.objects.exists() and not ScalingPolicy.objects.exists()
